#!/usr/bin/env bash
# saker-sweep under faults: in one job array, one trial's rank is SIGKILLed (saker-run
# restarts it in place) and another trial's task is preempted (USR1 to its batch shell:
# emergency checkpoint, requeue); both resume from their OWN lineage and every trial ends
# with the weights and metrics of an uninterrupted sweep. Then a sweep is scancelled and
# submitted again: finished trials are not rerun, the rest resume, and the results match.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/train_lib.sh"
source "$(dirname "$0")/sweep_lib.sh"
it_require_root
it_cluster_up --nodes 3 --gpus-per-node 0 --cpus-per-node 4 --no-job-submit
it_jobs_as_user
sweep_setup
options="slurm: {concurrency: 4, options: [-p, all, -n, '1']}"

# The uninterrupted reference: 4 trials (the same trials as every 4-trial sweep of seed 42).
write_sweep ref 4 "" "$options"
assert_rc 0 "reference sweep submitted" -- sweep submit ref.yaml
wait_array "$(array_of ref)" 90
assert_eq 4 "$(grep -l '^state=completed' ref.sweep/trials/*/state | wc -l)" "the reference sweep completed"

# The same trials, slowed down so faults land mid-run.
write_sweep faults 4 "--step-sleep-ms 30" "$options"
assert_rc 0 "fault sweep submitted" -- sweep submit faults.yaml
array=$(array_of faults)
dir=faults.sweep
wait_for_line 60 "$dir/trials/1/metrics" "^step=75 "
pid=$(rank_pid "$(task_job "$array" 1)" 0)
assert_rc 0 "trial 1's rank runs (pid ${pid:-none})" -- test -n "$pid"
kill -KILL "$pid"
# Preempt the task whose job id is the array's own id where it is not trial 1's: for that
# id `scontrol requeue ID` means the whole array (saker-run must name ARRAY_TASK).
pre=2
for t in 0 2 3; do [[ $(task_job "$array" $t) == "$array" ]] && pre=$t; done
it_log "preempting trial $pre (job $(task_job "$array" $pre), array $array)"
wait_for_line 60 "$dir/trials/$pre/metrics" "^step=100 "
jobp=$(task_job "$array" $pre)
# scancel too takes the array's own id for the whole array: name the task.
assert_rc 0 "USR1 to trial $pre's batch shell (job $jobp, ${array}_$pre)" -- scancel --signal=USR1 -b "${array}_$pre"
wait_array "$array" 150
for t in 0 1 2 3; do
  assert_eq completed "$(trial_state $dir $t)" "trial $t completed"
  assert_eq "$(hash_of ref.sweep/trials/$t/log)" "$(hash_of $dir/trials/$t/log)" "trial $t ends with the uninterrupted weights"
  assert_eq "$(metric_at ref.sweep $t 200)" "$(metric_at $dir $t 200)" "trial $t ends with the uninterrupted eval_loss"
done
log1=$(cat $dir/trials/1/log)
assert_contains "$log1" "restart: attempt 1 failed" "saker-run restarted trial 1's killed rank"
assert_contains "$(grep 'resumed from checkpoint step' <<<"$log1")" "in $IT_TMP/$dir/ckpt/faults/trial-1" \
  "trial 1 resumed from its own lineage"
logp=$(cat $dir/trials/$pre/log)
assert_contains "$logp" "emergency checkpoint of step" "trial $pre took an emergency checkpoint"
assert_contains "$logp" "resumed from checkpoint step" "trial $pre resumed after its requeue"
assert_contains "$(grep 'resumed from' <<<"$logp")" "$dir/ckpt/faults/trial-$pre" "from its own lineage"
assert_contains "$(cat $dir/slurm/${array}_$pre.out)" "restart count 1" "trial $pre's task ran again after the requeue"
assert_contains "$(cat $dir/slurm/${array}_$pre.out)" "trial $pre (lr=" "... and its worker resumed trial $pre"
for t in 0 1 2 3; do
  [[ $t == "$pre" || $t == 1 ]] && continue
  assert_not_contains "$(cat $dir/trials/$t/log)" "resumed from" "trial $t ran undisturbed"
  assert_not_contains "$(cat $dir/slurm/${array}_$t.out)" "restart count 1" "trial $t's task was not requeued with trial $pre's"
done

# Resume a whole sweep after scancel: 4 trials, 2 at a time, cancelled after the first two.
# saker-run takes the first scancel's SIGTERM for a preemption (emergency checkpoint,
# requeue), so stopping a sweep takes a second scancel for the requeued, pending tasks.
write_sweep cancel 4 "--step-sleep-ms 15" "slurm: {concurrency: 2, options: [-p, all, -n, '1']}"
assert_rc 0 "sweep to cancel submitted" -- sweep submit cancel.yaml
first=$(array_of cancel)
it_wait_for 60 "two trials of sweep cancel completed" \
  bash -c "(( \$(grep -l '^state=completed' cancel.sweep/trials/*/state 2>/dev/null | wc -l) >= 2 ))"
wait_for_line 60 cancel.sweep/trials/2/metrics "^step=50 "
assert_rc 4 "resubmitting while its array runs is refused (4)" -- sweep submit cancel.yaml
assert_contains "$IT_OUT" "job array $first still has tasks in Slurm" "... naming the array"
assert_rc 0 "scancel the sweep's array" -- scancel "$first"
it_wait_for 60 "no task of array $first runs" bash -c "[[ -z \$(squeue -h -r -j $first -t RUNNING,COMPLETING 2>/dev/null) ]]"
scancel "$first" 2>/dev/null
wait_array "$first" 60
done_before=$(grep -l '^state=completed' cancel.sweep/trials/*/state | sed 's|.*/trials/\([0-9]*\)/state|\1|' | sort | tr '\n' ' ')
assert_rc 0 "saker-sweep submit resumes the sweep" -- sweep submit cancel.yaml
assert_not_contains "$IT_OUT" "4 of 4 trials" "only the unfinished trials are submitted"
second=$(array_of cancel)
wait_array "$second" 120
assert_eq 4 "$(grep -l '^state=completed' cancel.sweep/trials/*/state | wc -l)" "every trial of the resumed sweep completed"
for t in $done_before; do
  assert_eq 1 "$(grep -c 'saker-train: mlp' cancel.sweep/trials/$t/log)" "trial $t, finished before scancel, never ran again"
done
assert_contains "$(cat cancel.sweep/trials/2/log)" "resumed from checkpoint step" "the cancelled trial 2 resumed from its checkpoint"
for t in 0 1 2 3; do
  assert_eq "$(hash_of ref.sweep/trials/$t/log)" "$(hash_of cancel.sweep/trials/$t/log)" "trial $t after scancel and resume: uninterrupted weights"
done
it_finish
