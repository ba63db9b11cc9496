#!/usr/bin/env bash
# Fault tolerance 4: a node is lost. The slurmd of the job's second node is SIGKILLed,
# with the job's processes on it (a crashed machine takes them along). saker-run does not
# wait for slurmctld to notice (SlurmdTimeout + ping cycle): srun reports the failed task,
# saker-run finds the node's slurmd gone, stops srun, releases the node from the job,
# requeues it at once and excludes the node; the job restarts on the remaining nodes with
# the same world size and ends with the same weights as an uninterrupted run.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/train_lib.sh"
it_require_root
train_fault_start -N2
wait_for_line 60 "$out" "step 75/200"
nodes=$(squeue -h -j "$job" -o %N)
victim=$(scontrol show hostnames "$nodes" | tail -n 1)
pid=$(rank_pid "$job" 1)
stepd=$(ps -o ppid= -p "$pid" | tr -d ' ')
slurmd=$(cat "$IT_PREFIX/run/slurmd-$victim.pid")
echo "killing node $victim: slurmd $slurmd, slurmstepd $stepd, rank 1 $pid"
t_fail=$(now)
# Root: a lost machine takes root's daemons along with the user's rank.
kill -KILL "$slurmd" "$stepd" "$pid"
t_pending=$(release_requeued "$job")
it_wait_for 10 "ExcNodeList=$victim on the requeued job" \
  bash -c "scontrol show job $job | grep -qE 'ExcNodeList=$victim( |\$)'"
assert_eq COMPLETED "$(it_job_wait "$job" 150)" "the job completes after losing $victim"
text=$(cat "$out")
assert_contains "$text" "node(s) $victim do not answer" "saker-run found $victim lost while srun still waited for it"
assert_contains "$text" "released lost node(s) $victim from job $job" "saker-run released $victim from the job"
assert_contains "$text" "requeued job $job" "saker-run requeued the job itself"
assert_not_contains "$(grep -E "requeue job JobId=$job due to failure of node" "$IT_PREFIX/log/slurmctld.log")" \
  "$victim" "slurmctld did not have to requeue the job itself"
run2=$(sed -n 's/^saker: job [0-9]* run 2 on \([^ ]*\) at .*/\1/p' "$out" | tail -n 1)
assert_eq 2 "$(scontrol show hostnames "$run2" | wc -l)" "the requeued run has 2 nodes again ($run2)"
assert_not_contains "$(scontrol show hostnames "$run2")" "$victim" "the requeued run avoids the lost node ($run2)"
assert_contains "$text" "over 2 rank(s)" "the world size is still 2"
assert_eq "$h" "$(hash_of "$out")" "the run ends with the uninterrupted hash on the remaining nodes"
echo "RECOVERY node-loss: $(recovery_seconds "$out" "$t_fail" "$t_pending") s from the kill to the first step after resume, requeue hold excluded"
it_finish
