#!/usr/bin/env bash
# Fault tolerance 3: preemption. `scancel --signal=USR1 -b` reaches saker-run (the batch
# shell), which forwards it; the ranks agree on a step, take an emergency checkpoint and
# exit; saker-run requeues the job; the requeued job resumes and ends with the same
# weights as an uninterrupted run. A second preemption signal goes straight to the
# ranks (`scancel -s USR1`, as --signal=USR1@N would), which must also requeue.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/train_lib.sh"
it_require_root
train_fault_start
wait_for_line 60 "$out" "step 50/200"
t_fail=$(now)
# The signals come from root, as Slurm's preemption sends them; the job is the test user's.
assert_rc 0 "USR1 to the batch shell" -- scancel --signal=USR1 -b "$job"
t_pending=$(release_requeued "$job")
wait_for_line 60 "$out" "first step after resume"
echo "RECOVERY preempt (batch signal): $(recovery_seconds "$out" "$t_fail" "$t_pending") s, requeue hold excluded"

wait_for_line 60 "$out" "step 150/200"
t_fail=$(now)
assert_rc 0 "USR1 to the ranks" -- scancel -s USR1 "$job"
t_pending=$(release_requeued "$job")
assert_eq COMPLETED "$(it_job_wait "$job" 120)" "the twice-preempted job completes"
text=$(cat "$out")
assert_contains "$text" "emergency checkpoint of step" "the ranks took an emergency checkpoint"
assert_contains "$text" "requeue: preempted (SIGUSR1 received" "saker-run logs the requeue with its reason"
assert_contains "$text" "requeue: preempted (ranks took an emergency checkpoint" "a signal to the ranks alone also requeues"
assert_contains "$text" "was requeued 2 time(s) by Slurm" "the job ran three times"
echo "RECOVERY preempt (ranks signal): $(recovery_seconds "$out" "$t_fail" "$t_pending") s, requeue hold excluded"
assert_eq "$h" "$(hash_of "$out")" "the preempted and requeued run ends with the uninterrupted hash"
it_finish
