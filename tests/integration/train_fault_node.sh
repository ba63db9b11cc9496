#!/usr/bin/env bash
# Fault tolerance 4: a node is lost. The slurmd of the job's second node is SIGKILLed,
# with the job's processes on it (a crashed machine takes them along). slurmctld notices
# (SlurmdTimeout), requeues the job (--requeue) onto the remaining nodes with the same
# world size, and the run ends with the same weights as an uninterrupted run.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/train_lib.sh"
it_require_root
it_cluster_up --nodes 3 --gpus-per-node 0 --cpus-per-node 4 --no-job-submit
train_setup
h=$(local_hash 2)

job=$(submit_template train-preemptible "$IT_PREFIX/ckpt" -p all -N2)
out="$IT_PREFIX/train-preemptible-$job.out"
wait_for_line 60 "$out" "step 75/200"
nodes=$(squeue -h -j "$job" -o %N)
victim=$(scontrol show hostnames "$nodes" | tail -n 1)
pid=$(rank_pid "$job" 1)
stepd=$(ps -o ppid= -p "$pid" | tr -d ' ')
slurmd=$(cat "$IT_PREFIX/run/slurmd-$victim.pid")
echo "killing node $victim: slurmd $slurmd, slurmstepd $stepd, rank 1 $pid"
t_fail=$(now)
kill -KILL "$slurmd" "$stepd" "$pid"
t_pending=$(release_requeued "$job")
assert_eq COMPLETED "$(it_job_wait "$job" 150)" "the job completes after losing $victim"
assert_rc 0 "sacct-free check of the node" -- scontrol show node "$victim"
assert_contains "$IT_OUT" "DOWN" "slurmctld marked $victim down"
text=$(cat "$out")
assert_contains "$text" "requeued 1 time(s) by Slurm" "Slurm requeued the job"
last_nodes=$(grep -E '^saker: job [0-9]+ run 2 on' "$out" | tail -n 1)
assert_not_contains "$last_nodes" "$victim" "the requeued run avoids the lost node ($last_nodes)"
assert_eq "$h" "$(hash_of "$out")" "the run ends with the uninterrupted hash on the remaining nodes"
echo "RECOVERY node-loss: $(recovery_seconds "$out" "$t_fail" "$t_pending") s (includes SlurmdTimeout detection), requeue hold excluded"
it_finish
