#!/usr/bin/env bash
# Fault tolerance 1+2: one rank of a 2-node job is SIGKILLed mid-run; saker-run restarts
# the step from the latest checkpoint within the same allocation, and the run ends with
# the same weights as an uninterrupted run.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/train_lib.sh"
it_require_root
train_fault_start
wait_for_line 60 "$out" "step 75/200"
pid=$(rank_pid "$job" 1)
assert_rc 0 "rank 1 of job $job runs (pid ${pid:-none})" -- test -n "$pid"
((IT_AS_USER)) && assert_eq "$IT_USER" "$(ps -o user= -p "$pid" | tr -d ' ')" "rank 1 runs as $IT_USER, not root"
t_fail=$(now)
kill -KILL "$pid"   # root, as the kernel's OOM killer or a crash: the rank is the test user's
assert_eq COMPLETED "$(it_job_wait "$job" 120)" "the job completes after the killed rank"
text=$(cat "$out")
assert_contains "$text" "restart: attempt 1 failed" "saker-run logs the restart with its reason"
assert_not_contains "$text" "requeued job" "a rank killed on healthy nodes is restarted in place, never requeued"
assert_not_contains "$text" "do not answer" "no node was taken for lost"
assert_contains "$text" "resumed from checkpoint step" "the step resumes from a checkpoint"
assert_eq "$h" "$(hash_of "$out")" "the restarted run ends with the uninterrupted hash"
echo "RECOVERY killed-rank: $(recovery_seconds "$out" "$t_fail") s from SIGKILL to the first step after resume"
it_finish
