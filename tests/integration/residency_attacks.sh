#!/usr/bin/env bash
# The attacker's suite against data residency (issue 11), run as an unprivileged user
# (lib.sh's $IT_USER, saker-user) against real Slurm daemons with the two-zone sample policy: saker[1-2] in AE
# (gpu-ae, cpu-ae), saker3 in DE (gpu-eu); patients is restricted to AE and needs a grant
# (account medical), telemetry lives in the EU.
#
# Every attack asserts where its task actually ran (SLURMD_NODENAME written by the task
# itself, "none" when it never ran) and that an audit log holds the decision: the
# controller's ($IT_PREFIX/etc/saker-audit.log) for submit/modify, the node's
# ($IT_PREFIX/saker-state/NODE/launch-audit.log) for launch.
#
# Root is the operator here, and only that: it sets node features, releases and cancels
# held jobs, edits admin_comment (A26), restarts slurmctld, swaps the policy and reads the
# audit logs (root's files: the trail a user must not be able to read or forge). Every
# submission, step and update the attacks make is the user's.
#
# The whole suite takes under a minute here (about 45 s), so it all runs by default.
source "$(dirname "$0")/lib.sh"
it_require_root

it_tmpdir
policy="$IT_TMP/policy.yaml"
cp "$SAKER_SRCDIR/tests/data/policy/two_zones.yaml" "$policy"
it_cluster_up --nodes 3 --gpus-per-node 4 --policy "$policy" \
  --partitions "gpu-ae=saker[1-2];cpu-ae=saker[1-2];gpu-eu=saker3"
scontrol update NodeName='saker[1-2]' AvailableFeatures=lustre-ae ActiveFeatures=lustre-ae
scontrol update NodeName=saker3 AvailableFeatures=lustre-eu ActiveFeatures=lustre-eu
audit_log="$IT_PREFIX/etc/saker-audit.log"
ctld_log="$IT_PREFIX/log/slurmctld.log"
out="$IT_TMP/out"
mkdir -p "$out" && chmod 1777 "$out" "$IT_TMP"
# The jobs only echo their node, so the user needs no build tree: as_user works even
# where it_jobs_as_user leaves lib.sh's own wrappers root's (a tree the user cannot read).
it_jobs_as_user
id -u "$IT_USER" >/dev/null 2>&1 || { it_fail "no user $IT_USER to attack as (useradd failed)"; it_finish; }

# as_user CMD...: run as the test user (no operator rights, cannot edit admin_comment).
as_user() { it_user "$@"; }
field() { scontrol show job "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n1; }
admin_comment() { scontrol show job "$1" | sed -n 's/^ *AdminComment=//p'; }  # may hold spaces
# The task writes where it ran; "none" when no task of the job ever started.
report='echo $SLURMD_NODENAME'
ran_on() { cat "$out/$1.out" 2>/dev/null | grep -o 'saker[0-9]*' | sort -u | tr '\n' ' ' | sed 's/ $//' || true; }
where() { local w; w=$(ran_on "$1"); echo "${w:-none}"; }
in_ae() { [[ $1 =~ ^(saker[12])( saker[12])*$ ]]; }
submit() { as_user sbatch --parsable -o "$out/%j.out" "$@" 2>&1 | tail -n1; }
# audit_has EVENT DECISION TEXT: the controller's log gets a record within 5 s.
audit_has() {
  local deadline=$((SECONDS + 5))
  while ((SECONDS < deadline)); do
    grep "\"event\":\"$1\"" "$audit_log" 2>/dev/null | grep "\"decision\":\"$2\"" | grep -qF -- "$3" && return 0
    sleep 0.2
  done
  return 1
}
launch_audit_has() { cat "$IT_PREFIX"/saker-state/*/launch-audit.log 2>/dev/null | grep "\"decision\":\"$1\"" | grep -qF -- "$2"; }
indexed() { sleep 1.5; }  # the plugin indexes new jobs in the background (well under a second idle)
refused_submit() {  # refused_submit NAME ARGS...: sbatch refused, nothing ran, a deny record names it
  local name=$1; shift
  local before; before=$(grep -c '"decision":"deny"' "$audit_log" 2>/dev/null || echo 0)
  assert_rc 1 "$name: refused" -- as_user sbatch -o "$out/refused-%j.out" "$@" --wrap "$report"
  it_wait_for 5 "$name: the refusal is audited" bash -c "(( \$(grep -c '\"decision\":\"deny\"' '$audit_log') > $before ))"
}
ran_in_ae() {  # ran_in_ae NAME JOB: completed, and only on AE nodes
  it_job_wait "$2" 60 >/dev/null
  local w; w=$(where "$2")
  if in_ae "$w"; then it_pass "$1: ran in AE only ($w)"; else it_fail "$1: ran on '$w'"; fi
}
never_ran() { assert_eq none "$(where "$2")" "$1: no task ran"; }

# ============ partitions ============
refused_submit "A1 patients on gpu-eu" -A medical -p gpu-eu --dataset=patients
refused_submit "A2 telemetry on gpu-ae" -p gpu-ae --dataset=telemetry
j=$(submit -A medical -p gpu-eu,gpu-ae --dataset=patients --wrap "$report")
if [[ $j =~ ^[0-9]+$ ]]; then ran_in_ae "A3 partition list gpu-eu,gpu-ae" "$j"; else it_pass "A3 partition list gpu-eu,gpu-ae: refused"; fi
j=$(submit -A medical --dataset=patients --wrap "$report")
ran_in_ae "A4 no partition: routed into the zone" "$j"
assert_rc 0 "A4 the decision is audited" -- audit_has submit modify "patients"

# ============ constraints and node lists ============
refused_submit "A5 patients -p gpu-eu with the AE feature" -A medical -p gpu-eu --constraint=lustre-ae --dataset=patients
j=$(submit -A medical -p gpu-ae -w saker3 --dataset=patients --wrap "$report")
[[ $j =~ ^[0-9]+$ ]] && { sleep 3; scancel "$j"; never_ran "A6 -w saker3 in gpu-ae" "$j"; } || it_pass "A6 -w saker3 in gpu-ae: refused by Slurm"
j=$(submit -A medical -p gpu-ae --constraint=lustre-eu --dataset=patients --wrap "$report")
[[ $j =~ ^[0-9]+$ ]] && { sleep 3; scancel "$j"; never_ran "A7 --constraint=lustre-eu" "$j"; } || it_pass "A7 --constraint=lustre-eu: refused"
j=$(submit -A medical -p gpu-ae -x saker1 --dataset=patients --wrap "$report")
ran_in_ae "A8 -x saker1 stays in the zone" "$j"

# ============ srun and salloc without sbatch ============
assert_rc 1 "A9 srun patients on gpu-eu is refused" -- as_user srun -A medical -p gpu-eu --dataset=patients bash -c "$report"
assert_not_contains "$IT_OUT" "saker3" "A9 no task ran on saker3"
assert_rc 1 "A10 salloc patients on gpu-eu is refused" -- as_user salloc -A medical -p gpu-eu --dataset=patients true
assert_rc 0 "A11 srun patients in AE runs" -- as_user srun -A medical -p gpu-ae --dataset=patients bash -c "$report"
[[ $IT_OUT =~ saker[12] && ! $IT_OUT =~ saker3 ]] && it_pass "A11 ran in AE ($IT_OUT)" || it_fail "A11 ran: $IT_OUT"
assert_rc 1 "A12 srun without grant (physics) is refused" -- as_user srun -A physics -p gpu-ae --dataset=patients bash -c "$report"
assert_rc 0 "A12 audited" -- audit_has submit deny "no grant"

# ============ steps inside allocations ============
alloc=$(submit -A physics -p gpu-ae --wrap 'sleep 60')
it_wait_for 20 "an allocation without datasets starts" bash -c "[[ \$(scontrol show job $alloc | grep -o 'JobState=[A-Z]*') == JobState=RUNNING ]]"
assert_rc 1 "A13 srun --overlap --dataset=patients without a grant is refused at launch" -- \
  as_user srun --jobid="$alloc" --overlap --dataset=patients bash -c "$report"
assert_not_contains "$IT_OUT" "saker1
" "A13 the task never ran"
assert_contains "$IT_OUT" "no grant" "A13 the user is told why"
assert_rc 0 "A13 the launch refusal is in the node's audit log" -- launch_audit_has deny "step declares patients"
assert_rc 0 "A14 a plain step in that allocation runs" -- as_user srun --jobid="$alloc" --overlap bash -c "$report"
assert_rc 1 "A15 a step declaring telemetry in AE is refused (zone)" -- \
  as_user srun --jobid="$alloc" --overlap --dataset=telemetry bash -c "$report"
assert_rc 0 "A15 audited at launch" -- launch_audit_has deny "step declares telemetry"
assert_rc 1 "A16 forged SLURM_SPANK_SAKER_DATASETS adds, never removes" -- \
  as_user env SLURM_SPANK_SAKER_DATASETS=telemetry srun --jobid="$alloc" --overlap bash -c "$report"
assert_rc 1 "A17 step with -w saker3 outside the allocation is refused by Slurm" -- \
  as_user srun --jobid="$alloc" --overlap -w saker3 bash -c "$report"
assert_not_contains "$IT_OUT" "saker3
" "A17 nothing ran on saker3"
scancel "$alloc"
med=$(submit -A medical -p gpu-ae --dataset=patients --wrap 'sleep 60')
it_wait_for 20 "a medical allocation starts" bash -c "[[ \$(scontrol show job $med | grep -o 'JobState=[A-Z]*') == JobState=RUNNING ]]"
assert_rc 0 "A18 a step declaring imagenet in a patients job runs" -- \
  as_user srun --jobid="$med" --overlap --dataset=imagenet bash -c "$report"
assert_rc 0 "A18 the step-level declaration is audited" -- launch_audit_has allow "step declares imagenet"
assert_rc 0 "A19 dropping --dataset from a step keeps the job's datasets (no SAKER_DATASETS games)" -- \
  as_user env SAKER_DATASETS= SLURM_SPANK_SAKER_DATASETS= srun --jobid="$med" --overlap bash -c "$report"
[[ $IT_OUT =~ saker[12] ]] && it_pass "A19 ran in AE" || it_fail "A19: $IT_OUT"
scancel "$med"

# ============ scontrol update, after indexing ============
held=$(submit --hold -A medical -p gpu-ae --dataset=patients@v3 --wrap "$report")
indexed
assert_contains "$(admin_comment "$held")" "saker-datasets=patients@v3" "the datasets live in admin_comment"
assert_rc 1 "A20 update partition=gpu-eu" -- as_user scontrol update jobid="$held" partition=gpu-eu
assert_rc 0 "A20 audited" -- audit_has modify deny "partition gpu-eu is in DE"
as_user scontrol update jobid="$held" partition=gpu-eu,gpu-ae >/dev/null 2>&1  # refused, or reduced to the zone
assert_eq gpu-ae "$(field "$held" Partition)" "A21 partition=gpu-eu,gpu-ae leaves only the zone's partition"
assert_rc 0 "A21 audited" -- audit_has modify modify "gpu-eu,gpu-ae"
assert_rc 0 "A22 features-only update" -- as_user scontrol update jobid="$held" features=
assert_eq gpu-ae "$(field "$held" Partition)" "A22 a features-only update did not move the partition"
assert_eq lustre-ae "$(field "$held" Features)" "A22 the replica feature is put back"
as_user scontrol update jobid="$held" features=lustre-eu >/dev/null 2>&1
assert_eq gpu-ae "$(field "$held" Partition)" "A23 features=lustre-eu leaves the partition"
assert_rc 0 "A24 comment update" -- as_user scontrol update jobid="$held" comment=saker-datasets=
assert_contains "$(admin_comment "$held")" "saker-datasets=patients@v3" "A24 the user's comment cannot touch the datasets"
assert_rc 1 "A25 the user cannot edit admin_comment" -- as_user scontrol update jobid="$held" admincomment=x
assert_contains "$(admin_comment "$held")" "saker-datasets=patients@v3" "A25 the marker stays"
assert_rc 0 "A26 an operator's admin_comment keeps the marker" -- scontrol update jobid="$held" admincomment=checked
assert_contains "$(admin_comment "$held")" "saker-datasets=patients@v3" "A26 the marker stays"
as_user scontrol update jobid="$held" nodelist=saker3 >/dev/null 2>&1
assert_eq gpu-ae "$(field "$held" Partition)" "A27 nodelist=saker3 does not move the job out"
as_user scontrol update jobid="$held" nodelist= >/dev/null 2>&1
assert_rc 1 "A27b an account change that loses the grant is refused" -- as_user scontrol update jobid="$held" account=physics
assert_rc 0 "A27b audited" -- audit_has modify deny "has no grant"
assert_rc 0 "A28 a harmless update (name) passes" -- as_user scontrol update jobid="$held" name=renamed
assert_rc 0 "A29 a move inside the zone passes" -- as_user scontrol update jobid="$held" partition=cpu-ae features=lustre-ae
scontrol release "$held"
ran_in_ae "A29 the moved job ran in the zone" "$held"

# Availability: a job without datasets is not held hostage by the fail-closed index.
free=$(submit --hold -p gpu-ae --wrap "$report")
it_wait_for 10 "A30a a job without datasets can be moved to gpu-eu soon after submission" \
  as_user scontrol update jobid="$free" partition=gpu-eu
scancel "$free"

# ============ name tricks ============
refused_submit "A30 PATIENTS in capitals on gpu-eu" -A medical -p gpu-eu --dataset=PATIENTS
refused_submit "A31 unknown version on gpu-eu" -A medical -p gpu-eu --dataset=patients@v9
# Refused by the option itself in sbatch (exit 255): nothing reaches slurmctld, nothing to audit there.
assert_rc 255 "A32 a duplicated list is refused at sbatch" -- as_user sbatch -A medical -p gpu-eu --dataset=patients,patients --wrap true
assert_rc 255 "A33 a glob as a name is refused at sbatch" -- as_user sbatch -A medical -p gpu-eu --dataset='patients*' --wrap true
assert_rc 255 "A33b a name with a space is refused at sbatch" -- as_user sbatch -A medical -p gpu-eu --dataset='pat ients' --wrap true
refused_submit "A34 public + restricted on gpu-eu" -A medical -p gpu-eu --dataset=imagenet,patients
j=$(as_user env SAKER_DATASETS= SPANK_SAKER_DATASETS= sbatch --parsable -o "$out/%j.out" -A medical -p gpu-eu --dataset=patients --wrap "$report" 2>/dev/null | tail -n1)
[[ $j =~ ^[0-9]+$ ]] && it_fail "A35 forged empty env let patients onto gpu-eu" || it_pass "A35 forged env at submission changes nothing"

# ============ arrays and split tasks ============
refused_submit "A36 an array of patients on gpu-eu" -A medical -p gpu-eu --array=1-3 --dataset=patients
arr=$(submit --hold -A medical -p gpu-ae --array=1-4 --dataset=patients --wrap "$report")
indexed
assert_rc 1 "A37 update of task ${arr}_3 to gpu-eu" -- as_user scontrol update jobid="${arr}_3" partition=gpu-eu
assert_rc 0 "A37 audited with the task's id form" -- audit_has modify deny "\"job_id\":\"${arr}_3\""
assert_rc 0 "A38 task ${arr}_2 split off into cpu-ae" -- as_user scontrol update jobid="${arr}_2" partition=cpu-ae
split=$(squeue -h -o '%A %i' | awk -v t="${arr}_2" '$2 == t { print $1 }')
assert_rc 1 "A38 the split task's new id ($split) is refused right away, not read as 'no datasets'" -- \
  as_user scontrol update jobid="$split" partition=gpu-eu
indexed
assert_rc 1 "A38 and after indexing" -- as_user scontrol update jobid="$split" partition=gpu-eu
as_user scontrol update jobid="${arr}_[1-4]" partition=gpu-eu >/dev/null 2>&1
assert_eq "" "$(squeue -h -o '%i %P' | grep "^${arr}_" | grep gpu-eu)" "A39 a range update moves no task"
scancel "$arr"

# ============ het jobs, both orders ============
refused_submit "A40 het: foreign component first, dataset in the second" -A medical -p gpu-eu : -A medical -p gpu-ae --dataset=patients
refused_submit "A41 het: dataset first, foreign component second" -A medical -p gpu-ae --dataset=patients : -A medical -p gpu-eu
assert_rc 1 "A42 srun het job across zones is refused" -- as_user srun -A medical -p gpu-eu true : -A medical -p gpu-ae --dataset=patients true
het=$(as_user sbatch --parsable --hold -o "$out/%j.out" -A medical -p gpu-ae --dataset=patients : -A medical -p gpu-ae --dataset=patients --wrap "$report" | tail -n1)
indexed
assert_rc 1 "A43 update of component $het+1 to gpu-eu" -- as_user scontrol update jobid="$het+1" partition=gpu-eu
assert_rc 1 "A44 update of leader $het to gpu-eu" -- as_user scontrol update jobid="$het" partition=gpu-eu
assert_rc 0 "A44 the component's refusal is audited" -- audit_has modify deny "\"job_id\":\"$het+1\""
scontrol release "$het"
ran_in_ae "A45 the het job ran in the zone" "$het"

# ============ dependencies ============
dep=$(submit --hold -A medical -p gpu-ae --dataset=patients --wrap "$report")
refused_submit "A46 a dependent job with patients on gpu-eu" -A medical -p gpu-eu --dependency=afterok:"$dep" --dataset=patients
after=$(submit -A medical -p gpu-ae --dependency=afterok:"$dep" --dataset=patients --wrap "$report")
indexed
assert_rc 1 "A47 moving the dependent job out" -- as_user scontrol update jobid="$after" partition=gpu-eu
scontrol release "$dep"
ran_in_ae "A47 the dependency chain ran in the zone" "$after"

# ============ burst, requeue, restart, policy changes, malformed marker ============
{
  # burst: an update before the job is indexed is refused, and audited as such.
  for _ in $(seq 1 15); do b=$(submit --hold -A medical -p gpu-ae --dataset=patients --wrap "$report"); done
  as_user scontrol update jobid="$b" comment=early >/dev/null 2>&1
  assert_rc 1 "A48 an escape right after a burst" -- as_user scontrol update jobid="$b" partition=gpu-eu
  assert_eq gpu-ae "$(field "$b" Partition)" "A48 stayed"
  indexed
  assert_rc 1 "A49 the early comment update erased nothing" -- as_user scontrol update jobid="$b" partition=gpu-eu
  scancel --user="$IT_USER" --state=PENDING

  # requeue: the marker survives.
  rq=$(submit -A medical -p gpu-ae --dataset=patients --wrap "$report; sleep 30")
  it_wait_for 20 "a job to requeue starts" bash -c "[[ \$(scontrol show job $rq | grep -o 'JobState=[A-Z]*') == JobState=RUNNING ]]"
  scontrol requeuehold "$rq"
  sleep 2
  assert_contains "$(admin_comment "$rq")" "saker-datasets=patients" "A50 the requeued job keeps its datasets"
  assert_rc 1 "A50 the requeued job cannot be moved out" -- as_user scontrol update jobid="$rq" partition=gpu-eu
  scancel "$rq"

  # slurmctld restart between submission and update.
  rs=$(submit --hold -A medical -p gpu-ae --dataset=patients --wrap "$report")
  pid=$(cat "$IT_PREFIX/run/slurmctld.pid")
  kill "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
  it_slurmctld_start
  it_wait_for 30 "slurmctld is back" scontrol ping
  assert_rc 1 "A51 an update right after the restart is refused" -- as_user scontrol update jobid="$rs" partition=gpu-eu
  indexed
  assert_rc 1 "A52 and after the index reloaded" -- as_user scontrol update jobid="$rs" partition=gpu-eu
  assert_contains "$(admin_comment "$rs")" "saker-datasets=patients" "A52 the datasets survived the restart"
  scancel "$rs"

  # policy changed after submission: zones and grants, caught at launch.
  install_policy() {
    local n; n=$(grep -c "policy $policy loaded" "$ctld_log")
    cp "$1" "$policy"
    it_wait_for 20 "the policy reload" bash -c "(( \$(grep -c 'policy $policy loaded' '$ctld_log') > $n ))"
  }
  late=$(submit --hold -A medical -p gpu-ae --dataset=patients --wrap "$report")
  sed 's/datasets: \["patients\*"\]/datasets: ["nothing*"]/' "$SAKER_SRCDIR/tests/data/policy/two_zones.yaml" >"$IT_TMP/nogrant.yaml"
  install_policy "$IT_TMP/nogrant.yaml"
  scontrol release "$late"
  it_job_wait "$late" 60 >/dev/null
  never_ran "A53 grant revoked after submission: refused at launch" "$late"
  assert_rc 0 "A53 the launch refusal is audited on the node" -- launch_audit_has deny "no grant"
  install_policy "$SAKER_SRCDIR/tests/data/policy/two_zones.yaml"

  # a malformed marker (an operator's typo) refuses instead of reading as no datasets.
  mal=$(submit --hold -A medical -p gpu-ae --dataset=patients --wrap "$report")
  scontrol update jobid="$mal" admincomment="saker-datasets=a,,b" 2>/dev/null
  indexed
  assert_rc 1 "A54 a job whose marker is malformed cannot be moved" -- as_user scontrol update jobid="$mal" partition=cpu-ae
  scancel "$mal"
}

# ============ the trail ============
sleep 1
assert_rc 0 "the controller's audit log verifies" -- "$SAKER_BUILDDIR/policies/saker-policy/saker-policy" audit verify "$audit_log"
for log in "$IT_PREFIX"/saker-state/*/launch-audit.log; do
  assert_rc 0 "the launch audit log $(basename "$(dirname "$log")") verifies" -- \
    "$SAKER_BUILDDIR/policies/saker-policy/saker-policy" audit verify "$log"
done
log=$(ls "$IT_PREFIX"/saker-state/*/launch-audit.log | head -n1)
cp "$log" "$IT_TMP/cut.log" && cp "$log.head" "$IT_TMP/cut.log.head" && sed -i '$d' "$IT_TMP/cut.log"
assert_rc 1 "a launch log with its last line deleted fails verification" -- \
  "$SAKER_BUILDDIR/policies/saker-policy/saker-policy" audit verify "$IT_TMP/cut.log"
assert_rc 0 "slurmctld is still alive" -- scontrol ping
it_finish
