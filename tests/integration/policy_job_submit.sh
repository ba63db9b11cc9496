#!/usr/bin/env bash
# job_submit_saker.so and the launch-time residency check through real Slurm daemons:
# two zones (gpu-ae, cpu-ae on saker[1-2] in AE; gpu-eu on saker3 in DE), datasets of
# each classification; allowed, routed, denied and audit-mode jobs; scontrol update
# escape attempts; a policy replaced by a broken one; a policy changed after
# submission caught at launch; the audit log verifying after all of it.
source "$(dirname "$0")/lib.sh"
it_require_root

src_policy="$SAKER_SRCDIR/tests/data/policy/two_zones.yaml"
it_tmpdir  # removed at exit with everything else of this test
policy="$IT_TMP/policy.yaml"
cp "$src_policy" "$policy"
it_cluster_up --nodes 3 --gpus-per-node 4 --policy "$policy" \
  --partitions "gpu-ae=saker[1-2];cpu-ae=saker[1-2];gpu-eu=saker3"
it_jobs_as_user
ctld_log="$IT_PREFIX/log/slurmctld.log"
audit_log="$IT_PREFIX/etc/saker-audit.log"
saker_policy="$SAKER_BUILDDIR/policies/saker-policy/saker-policy"
scontrol update NodeName='saker[1-2]' AvailableFeatures=lustre-ae ActiveFeatures=lustre-ae

job_field() { scontrol show job "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n1; }
loads() { grep -c "policy $policy loaded" "$ctld_log" || true; }
# install_policy FILE: replaces the policy and waits until slurmctld reloaded it.
install_policy() {
  local before; before=$(loads)
  cp "$1" "$policy"
  it_wait_for 20 "the policy reload" bash -c "(( \$(grep -c 'policy $policy loaded' '$ctld_log') > $before ))"
}

assert_contains "$(cat "$ctld_log")" "policy $policy loaded, revision" "slurmctld loaded the policy at start"

# --- allowed: restricted data in its zone, with a grant; locality adds the replica's feature.
assert_rc 0 "patients@v3 on gpu-ae with account medical is accepted" -- \
  sbatch --parsable -A medical -p gpu-ae --dataset=patients@v3 -o /dev/null --wrap true
job=$(tail -n1 <<<"$IT_OUT")
assert_contains "$IT_OUT" "feature lustre-ae added" "sbatch tells the user about the added feature"
assert_eq "lustre-ae" "$(job_field "$job" Features)" "the job must run where a replica is mounted"
assert_eq COMPLETED "$(it_job_wait "$job" 60)" "the routed job runs to completion"

assert_rc 0 "public data runs in any zone" -- sbatch --parsable -p gpu-eu --dataset=imagenet -o /dev/null --wrap true
assert_eq gpu-eu "$(job_field "$(tail -n1 <<<"$IT_OUT")" Partition)" "the public job stays where it asked"

# --- routed: no partition given, an EU-only dataset goes to gpu-eu.
assert_rc 0 "telemetry without a partition is accepted" -- sbatch --parsable --dataset=telemetry -o /dev/null --wrap true
routed=$(tail -n1 <<<"$IT_OUT")
assert_contains "$IT_OUT" "partition set to gpu-eu" "sbatch says why the partition changed"
assert_eq gpu-eu "$(job_field "$routed" Partition)" "the job was routed into the EU zone"
assert_eq COMPLETED "$(it_job_wait "$routed" 60)" "the routed EU job completes on saker3"

# --- denied, with the message the user sees.
assert_rc 1 "patients@v3 on gpu-eu is refused" -- sbatch -A medical -p gpu-eu --dataset=patients@v3 --wrap true
assert_contains "$IT_OUT" "dataset patients@v3 is resident in AE; partition gpu-eu is in DE; allowed: gpu-ae, cpu-ae" \
  "the refusal names the rule and where the job would be allowed"
assert_rc 1 "restricted data without a grant is refused" -- sbatch -A physics -p gpu-ae --dataset=patients --wrap true
assert_contains "$IT_OUT" "has no grant for restricted dataset patients" "the refusal names the missing grant"
assert_rc 1 "an unknown dataset is refused" -- sbatch -p gpu-ae --dataset=genomes --wrap true
assert_contains "$IT_OUT" "dataset genomes is not in the site policy" "the refusal names the unknown dataset"
assert_rc 1 "srun is refused the same way" -- srun -A medical -p gpu-eu --dataset=patients true
assert_contains "$IT_OUT" "is resident in AE" "srun shows the reason"
assert_rc 1 "GPUs on a CPU-only partition are refused" -- sbatch -p cpu-ae --gres=gpu:1 --wrap true
assert_contains "$IT_OUT" "partition cpu-ae is CPU-only" "the GPU rule explains itself"
assert_rc 0 "a job without datasets passes" -- sbatch --parsable -p gpu-eu -o /dev/null --wrap true

# --- scontrol update cannot move a job out of its zone.
assert_rc 0 "a held AE job is accepted" -- sbatch --parsable --hold -A medical -p gpu-ae --dataset=patients@v3 --wrap true
held=$(tail -n1 <<<"$IT_OUT")
sleep 1.5  # the plugin indexes jobs with datasets in the background (at most a second)
assert_rc 1 "scontrol update partition=gpu-eu is refused" -- scontrol update jobid="$held" partition=gpu-eu
assert_eq gpu-ae "$(job_field "$held" Partition)" "the job stayed in its zone"
assert_rc 0 "a move inside the zone is allowed" -- scontrol update jobid="$held" partition=cpu-ae
assert_eq cpu-ae "$(job_field "$held" Partition)" "the job moved to cpu-ae"
assert_rc 0 "a user comment update keeps the datasets" -- scontrol update jobid="$held" comment=mine
sleep 1.5
assert_rc 1 "the escape is still refused after the comment change" -- scontrol update jobid="$held" partition=gpu-eu
scancel "$held"

# --- a burst of submissions: the plugin indexes and audits them in batches. An update of a
# job it has not indexed yet is refused (fail closed), never let through.
audited_before=$(wc -l <"$audit_log")
burst=()
for _ in $(seq 1 20); do
  burst+=("$(sbatch --parsable --hold -A medical -p gpu-ae --dataset=patients@v3 -o /dev/null --wrap true 2>/dev/null)")
done
last=${burst[-1]}
assert_rc 1 "an escape right after the burst is refused" -- scontrol update jobid="$last" partition=gpu-eu
assert_eq gpu-ae "$(job_field "$last" Partition)" "the last job of the burst stayed in its zone"
it_wait_for 10 "once indexed, a move of that job inside the zone is allowed" \
  scontrol update jobid="$last" partition=cpu-ae
assert_rc 1 "and its escape is refused by the policy" -- scontrol update jobid="$last" partition=gpu-eu
assert_contains "$(cat "$ctld_log")" "modify of job $last denied" "slurmctld.log names the refused update"
it_wait_for 5 "the burst's decisions reach the audit log" \
  bash -c "(( \$(wc -l <'$audit_log') >= $audited_before + 20 ))"
scancel "${burst[@]}"

# --- a broken policy keeps the last good one, and says where it is broken.
broken=$(mktemp /tmp/saker-broken-XXXXXX.yaml)
sed 's/^unknown_datasets: deny/unknown_datasets: deny\ncolour: blue/' "$src_policy" >"$broken"
cp "$broken" "$policy"
it_wait_for 20 "the rejection in slurmctld.log" grep -q "new policy rejected" "$ctld_log"
assert_contains "$(grep "new policy rejected" "$ctld_log")" "$policy:5:1: unknown key 'colour'" \
  "the log names file:line:column of the problem"
assert_contains "$(grep "new policy rejected" "$ctld_log")" "keeping the last good policy" "the old policy stays"
assert_rc 1 "the last good policy still refuses" -- sbatch -A medical -p gpu-eu --dataset=patients --wrap true
assert_rc 0 "and still accepts" -- sbatch --parsable -A medical -p gpu-ae --dataset=patients -o /dev/null --wrap true
rm -f "$broken"

# --- audit mode: allowed, with "would deny" shown and recorded.
audit_policy=$(mktemp /tmp/saker-audit-XXXXXX.yaml)
sed 's/residency: enforce/residency: audit/' "$src_policy" >"$audit_policy"
install_policy "$audit_policy"
assert_rc 0 "in audit mode the out-of-zone job is accepted" -- \
  sbatch --parsable -A medical -p gpu-eu --dataset=patients@v3 -o "$IT_PREFIX/audit-%j.out" --wrap true
audit_job=$(tail -n1 <<<"$IT_OUT")
assert_contains "$IT_OUT" "would deny: dataset patients@v3 is resident in AE" "sbatch shows the audit note"
assert_eq COMPLETED "$(it_job_wait "$audit_job" 60)" "the audit-mode job runs (the launch check only notes it)"
assert_contains "$(cat "$IT_PREFIX/audit-$audit_job.out")" "would deny: node saker3 is in zone eu" \
  "the task's output carries the launch-time audit note"
rm -f "$audit_policy"

# --- a policy changed after submission is caught at launch, with the message.
install_policy "$src_policy"
assert_rc 0 "a held telemetry job on gpu-eu is accepted" -- \
  sbatch --parsable --hold -p gpu-eu --dataset=telemetry -o "$IT_PREFIX/late-%j.out" --wrap 'echo ran'
late=$(tail -n1 <<<"$IT_OUT")
moved=$(mktemp /tmp/saker-moved-XXXXXX.yaml)
sed 's/zones: \[eu\]/zones: [ae]/; /replicas: \[lustre-eu\]/d' "$src_policy" >"$moved"
install_policy "$moved"
scontrol release "$late"
state=$(it_job_wait "$late" 60)
assert_eq FAILED "$state" "the job fails at launch on saker3"
out=$(cat "$IT_PREFIX/late-$late.out" 2>/dev/null)
assert_contains "$out" "node saker3 is in zone eu (DE); dataset telemetry may only be processed in ae (AE)" \
  "the failure names node, zone, dataset and allowed zones"
assert_not_contains "$out" "ran" "the job's command never ran"
rm -f "$moved"

# --- the audit trail verifies after all of it, and slurmctld is alive.
sleep 1
assert_rc 0 "saker-policy audit verify passes" -- "$saker_policy" audit verify "$audit_log"
assert_contains "$IT_OUT" "chain intact" "the chain is intact"
records=$(wc -l <"$audit_log")
(( records >= 12 )) && assert_eq ok ok "the log holds a record per decision ($records)" || assert_eq ">=12" "$records" "records"
assert_contains "$(cat "$audit_log")" '"decision":"deny"' "denials are recorded"
assert_contains "$(cat "$audit_log")" '"would_deny":["would deny:' "audit-mode notes are recorded"
tampered=$(mktemp)
sed '3s/"deny"/"allow"/;3s/"modify"/"allow"/' "$audit_log" >"$tampered"
assert_rc 1 "an edited copy fails verification" -- "$saker_policy" audit verify "$tampered"
assert_contains "$IT_OUT" ":3:" "verification names the edited line"
rm -f "$tampered"
assert_rc 0 "slurmctld is still alive" -- scontrol ping
assert_contains "$IT_OUT" "UP" "scontrol ping reports the controller up"
it_finish
