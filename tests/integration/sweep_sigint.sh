#!/usr/bin/env bash
# Ctrl-C of a `saker-sweep trial` inside a Slurm job array. A batch task has no terminal:
# the nearest thing to a terminal's Ctrl-C (SIGINT to the whole foreground process group,
# tests/scripts/cli_contract.sh's SIGINT class) is `scancel --signal=INT --full`, SIGINT to
# every process of the task's batch step: saker-sweep, saker-run and saker-train alike. In
# an array that is a stop to be resumed, as a preemption is: saker-train writes its
# emergency checkpoint, saker-run requeues the task (exit 75), the worker keeps the trial
# and says it resumes when the job runs again; the task runs again, resumes the trial from
# that checkpoint (not from step 0) and completes it. No other trial is started, failed or
# left running.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/train_lib.sh"
source "$(dirname "$0")/sweep_lib.sh"
it_require_root
it_cluster_up --nodes 1 --gpus-per-node 0 --cpus-per-node 2 --no-job-submit --partitions "all=saker1"
it_jobs_as_user
sweep_setup

write_sweep ci 1 "--step-sleep-ms 40" "slurm: {options: [-p, all, -n, '1']}"
assert_rc 0 "a 1-trial sweep submitted as a job array" -- sweep submit ci.yaml
array=$(array_of ci)
dir=ci.sweep
it_wait_for 120 "trial 0 reported step 50" grep -q "^step=50 " $dir/trials/0/metrics
assert_rc 0 "SIGINT to every process of task ${array}_0's batch step" -- scancel --signal=INT --full "${array}_0"
it_wait_for 60 "the task is requeued" bash -c "scontrol show job ${array}_0 | grep -q 'Restarts=1'"
wait_array "$array" 150
out=$(cat $dir/slurm/*.out)
log=$(cat $dir/trials/0/log)
assert_contains "$log" "stop signal (preemption, SIGTERM, SIGUSR1 or SIGINT): emergency checkpoint at step" \
  "saker-train takes the SIGINT as a stop and writes its emergency checkpoint"
stopped=$(sed -n 's/.*emergency checkpoint of step \([0-9]*\) committed.*/\1/p' <<<"$log" | head -n1)
assert_rc 0 "the emergency checkpoint (step ${stopped:-none}) is past step 50" -- test "${stopped:-0}" -ge 50
assert_contains "$out" "trial 0 stopped for requeue (exit 75) at rung 0; it resumes from its checkpoint when this job runs again" \
  "the worker keeps the trial for the requeued task"
assert_not_contains "$out" "failed" "the trial is not marked failed"
assert_contains "$out" "trial 0 (" "the requeued task takes the trial up again"
assert_contains "$out" "resumes at rung 0" "... as a resume at its rung"
assert_contains "$log" "resumed from checkpoint step $stopped" "saker-train resumes from the emergency checkpoint, not from step 0"
assert_eq completed "$(trial_state $dir 0)" "trial 0 completes"
assert_contains "$(tail -n1 $dir/trials/0/metrics)" "step=200 " "at the whole budget"
assert_rc 0 "saker-sweep status" -- sweep status ci.yaml
assert_contains "$IT_OUT" "1 trials: 1 completed" "status: completed, nothing left running"
it_finish
