#!/usr/bin/env bash
# saker-sweep on a real cluster: a 12-trial random sweep of saker-train's learning rate and
# width as ONE job array (every trial its own lineage; `best` names the trial with the best
# final metric and its command reproduces the weight hash); ASHA with a 4-trial rung (three
# stop at their rung, the promoted one resumes from its checkpoint); a dataset-restricted
# sweep routed by the site policy, and one refused by it.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/train_lib.sh"
source "$(dirname "$0")/sweep_lib.sh"
it_require_root
# The two-zone policy with its storage mounted under this test's scratch directory, so the
# checkpoint rule can be met (EU data checkpoints under $site/lustre/eu) and broken.
it_tmpdir
site=$IT_TMP/site
mkdir -p "$site/lustre/ae" "$site/lustre/eu"
sed "s|/lustre/|$site/lustre/|g" "$SAKER_SRCDIR/tests/data/policy/two_zones.yaml" >"$IT_TMP/policy.yaml"
it_cluster_up --nodes 3 --gpus-per-node 4 --policy "$IT_TMP/policy.yaml" \
  --partitions "gpu-ae=saker[1-2];cpu-ae=saker[1-2];gpu-eu=saker3;all=saker[1-3]"
it_jobs_as_user
((IT_AS_USER)) && chmod 1777 "$site/lustre/ae" "$site/lustre/eu"  # the trials checkpoint there
sweep_setup
job_field() { scontrol show job "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n1; }

# --- 12 trials, 4 at a time, as one job array.
write_sweep lr-width 12 "" "slurm: {concurrency: 4, options: [-p, all, -n, '1']}"
assert_rc 0 "saker-sweep submit" -- sweep submit lr-width.yaml
assert_contains "$IT_OUT" "12 of 12 trials (0-11), at most 4 at a time" "one array of every trial, %4"
array=$(array_of lr-width)
assert_eq "ArrayTaskThrottle=4" "$(scontrol show job "$array" 2>/dev/null | grep -o 'ArrayTaskThrottle=[0-9]*' | head -n1)" \
  "Slurm holds the sweep as an array with its concurrency limit"
wait_array "$array" 150
dir=lr-width.sweep
for t in $(seq 0 11); do
  [[ $(trial_state $dir "$t") == completed ]] || it_fail "trial $t is $(trial_state $dir "$t"), not completed"
done
assert_eq 12 "$(grep -l '^state=completed' $dir/trials/*/state | wc -l)" "all 12 trials completed"
assert_eq 12 "$(ls $dir/slurm/ | grep -c "^${array}_[0-9]*\.out$")" "the 12 trials ran as the 12 tasks of that one array"
assert_eq 12 "$(ls -d $dir/ckpt/lr-width/trial-* | wc -l)" "12 lineages, one per trial, named by sweep and trial id"
mixed=0
for t in $(seq 0 11); do
  ls "$dir/ckpt/lr-width/trial-$t" | grep -q 'ckpt-0*200\.h5' || mixed=1
  grep -q "resumed from" "$dir/trials/$t/log" && mixed=1  # nobody resumed another's checkpoint
done
assert_eq 0 "$mixed" "every lineage ends at step 200 and no trial started from a checkpoint"
assert_eq 12 "$(sort -u <(for t in $(seq 0 11); do hash_of "$dir/trials/$t/log"; done) | wc -l)" \
  "12 different final weight hashes (12 different trials)"

# The best trial: the lowest eval_loss at step 200, as the metrics files say.
expected=$(for t in $(seq 0 11); do echo "$(metric_at $dir "$t" 200) $t"; done | sort -g | head -n1 | cut -d' ' -f2)
assert_rc 0 "saker-sweep best" -- sweep best lr-width.yaml
assert_contains "$IT_OUT" "best trial $expected of 12 (sweep lr-width): eval_loss" "best names trial $expected"
cmd=$(sweep best --command lr-width.yaml)
repro=$(sbatch --parsable -p all -n 1 -o "$IT_TMP/repro.out" --wait --wrap "$cmd")
assert_eq "$(hash_of "$dir/trials/$expected/log")" "$(hash_of "$IT_TMP/repro.out")" \
  "best's command (job $repro, from scratch) ends with the trial's weight hash"
assert_contains "$(cat "$IT_TMP/repro.out")" "steps, seed 7" "the reproduction trained from step 0"
assert_not_contains "$(cat "$IT_TMP/repro.out")" "resumed from" "the reproduction did not resume a checkpoint"

assert_rc 0 "saker-sweep report" -- sweep report lr-width.yaml
report=$IT_OUT
assert_contains "$(head -n 2 <<<"$report")" "$expected*" "report lists the best trial first, marked"
assert_eq 12 "$(grep -c '<polyline' $dir/report.svg)" "the SVG plot has one curve per trial"
echo "$report" | sed 's/^/# /'
assert_rc 0 "submitting a finished sweep again" -- sweep submit lr-width.yaml
assert_contains "$IT_OUT" "all 12 trials of sweep lr-width are finished; nothing to submit" "finished trials never rerun"

# --- ASHA with a 4-trial rung: rungs of 50 and 200 steps, the best 1 of 4 goes on.
write_sweep asha 4 "" "early_stopping: {rule: asha, min_steps: 50, reduction: 4}" \
  "slurm: {concurrency: 2, options: [-p, all, -n, '1']}"
assert_rc 0 "ASHA sweep submitted" -- sweep submit asha.yaml
wait_array "$(array_of asha)" 120
adir=asha.sweep
best50=$(for t in 0 1 2 3; do echo "$(metric_at $adir "$t" 50) $t"; done | sort -g | head -n1 | cut -d' ' -f2)
for t in 0 1 2 3; do
  if [[ $t == "$best50" ]]; then
    assert_eq completed "$(trial_state $adir "$t")" "trial $t (best at step 50) was promoted and completed"
    assert_contains "$(cat $adir/trials/$t/log)" "resumed from checkpoint step 50" \
      "the promoted trial resumed from its step-50 checkpoint (its step counter went on)"
    assert_eq 2 "$(grep -c 'saker-train: mlp' $adir/trials/$t/log)" \
      "two runs of the promoted trial: rung 0, then the resumed rung 1"
    assert_contains "$(grep 'first step after resume' $adir/trials/$t/log)" "step 51 at" "the first step after the promotion is 51"
    assert_contains "$(cat $adir/trials/$t/metrics | tail -n1)" "step=200 " "it reached the whole budget"
  else
    assert_eq stopped "$(trial_state $adir "$t")" "trial $t stopped at its rung"
    assert_eq "step=50" "$(tail -n1 $adir/trials/$t/metrics | cut -d' ' -f1)" "trial $t's last report is step 50"
    assert_eq 1 "$(ls $adir/ckpt/asha/trial-$t | grep -c 'ckpt-0*50\.h5')" "trial $t ended cleanly with its step-50 checkpoint"
  fi
done
assert_rc 0 "saker-sweep best (ASHA)" -- sweep best asha.yaml
assert_contains "$IT_OUT" "best trial $best50 of 4" "the promoted trial is the best"

# --- Datasets: the policy routes an EU-only dataset to gpu-eu, and refuses it in AE; the
# trials' lineages fall under its checkpoint rule (spank_saker.so hands saker-train the policy).
write_sweep eu-data 2 "" "budget: {steps: 50}" "slurm: {datasets: [telemetry]}" "checkpoints: $site/lustre/eu/sweeps"
sed -i '/^budget: {steps: 200}$/d' eu-data.yaml
assert_rc 0 "a telemetry sweep is accepted" -- sweep submit eu-data.yaml
assert_contains "$IT_OUT" "partition set to gpu-eu" "sbatch's policy note is shown"
eu=$(array_of eu-data)
assert_eq gpu-eu "$(job_field "$eu" Partition)" "the policy routed the sweep's array to the EU partition"
wait_array "$eu" 90
assert_eq 2 "$(grep -l '^state=completed' eu-data.sweep/trials/*/state | wc -l)" "the routed trials ran on saker3"
assert_eq 2 "$(ls -d "$site"/lustre/eu/sweeps/eu-data/trial-*/ckpt-*50.h5 | wc -l)" "their lineages are on EU storage"
write_sweep eu-ckpt-ae 1 "" "budget: {steps: 50}" "slurm: {datasets: [telemetry]}" "checkpoints: $site/lustre/ae/sweeps"
sed -i '/^budget: {steps: 200}$/d' eu-ckpt-ae.yaml
assert_rc 0 "a telemetry sweep checkpointing to AE storage is submitted" -- sweep submit eu-ckpt-ae.yaml
wait_array "$(array_of eu-ckpt-ae)" 60
assert_eq failed "$(trial_state eu-ckpt-ae.sweep 0)" "its trial fails: the policy refuses its lineage"
assert_rc 0 "saker-sweep status" -- sweep status eu-ckpt-ae.yaml
assert_contains "$IT_OUT" "trial 0 failed: exit 78 at rung 0" "status names the failure (exit 78: refused)"
assert_contains "$(cat eu-ckpt-ae.sweep/trials/0/log)" "may only be kept in eu (DE)" "the trial's log has the policy's reason"
write_sweep ae-data 2 "" "slurm: {datasets: [telemetry], options: [-p, gpu-ae]}"
assert_rc 78 "a telemetry sweep on gpu-ae is refused (78)" -- sweep submit ae-data.yaml
assert_contains "$IT_OUT" "sbatch refused sweep ae-data's job array" "saker-sweep says sbatch refused it"
assert_contains "$IT_OUT" "telemetry" "with the policy's reason"
assert_eq "" "$(cat ae-data.sweep/jobs 2>/dev/null)" "no job array was recorded"
it_finish
