#!/usr/bin/env bash
# Elastic training inside one allocation with a saker.torch script (issue 32, its tests: "it
# ends with the uninterrupted run's hash (saker-train, and a saker.torch elastic script)").
# A Horovod elastic script, only its import changed, with 4 logical workers
# (tests/python/torch_elastic_logical_check.py, elastic: hvd.elastic.run, a TorchState
# committed every 5 steps) runs under `saker-run --nodes 2:4` on 4 nodes. One node is lost
# (its slurmd, slurmstepd and rank SIGKILLed, as a crashed machine): the run goes on at once
# on 3 nodes from the last commit, without a requeue; the node's slurmd returns, the run
# grows back to 4 at a commit, and its parameters end bit for bit where the uninterrupted
# run's do. The job is the test user's (elastic_lib.sh); root only kills and restarts slurmd.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/train_lib.sh"
source "$(dirname "$0")/elastic_lib.sh"
source "$(dirname "$0")/../python/python_for_build.sh"
it_require_root
py=/usr/bin/python3
$py -c 'import torch' 2>/dev/null || { echo "SKIP: $py cannot import torch (apt-get install python3-torch)"; exit 77; }

elastic_cluster_up  # from here on the jobs and runs are the test user's
py=$(python_for_build "$py" "$IT_PREFIX")
script=$SAKER_SRCDIR/tests/python/torch_elastic_logical_check.py
steps=400
# The script and its environment, for a rank: 4 logical workers, a pause per step so that
# the losses land mid-run (the job's pace is set by it, not by the machine).
rank_cmd="env PYTHONPATH=$SAKER_BUILDDIR/python SAKER_COMM_TIMEOUT=60 LOGICAL_STEPS=$steps $py $script 4"
finals() { grep -o "rank [0-9]*/$2 $3 params [0-9a-f]\{32\}" "$1"; }

# The uninterrupted run: one rank computes the 4 workers (the same bits on 1..4 ranks:
# tests/python/torch_elastic_logical.sh).
it_job "$SAKER_RUN_BIN" --local -n 1 -- $rank_cmd logical >"$IT_TMP/ref.out" 2>&1
want=$(finals "$IT_TMP/ref.out" 1 logical | awk '{ print $5 }')
[[ $want =~ ^[0-9a-f]{32}$ ]] && it_pass "the uninterrupted run printed its hash ($want)" ||
  it_fail "the uninterrupted run printed no hash: $(tail -n 5 "$IT_TMP/ref.out")"

ckpt=$(mktemp -d "$IT_PREFIX/ckpt-XXXXXX")
rmdir "$ckpt"  # saker-run makes it, as the user
job=$(sbatch --parsable -p all -N 4 --ntasks-per-node=1 --requeue --no-kill --open-mode=append -D "$IT_PREFIX" \
  -o "$IT_PREFIX/torch-%j.out" --wrap "$SAKER_RUN_BIN --nodes 2:4 --resize-wait 30 --grace 20 --ckpt-dir $ckpt -- \
env LOGICAL_SLEEP_MS=$ELASTIC_STEP_SLEEP_MS $rank_cmd elastic")
out="$IT_PREFIX/torch-$job.out"
if ((IT_AS_USER)); then assert_eq "$IT_USER" "$(squeue -h -j "$job" -o %u)" "the job is $IT_USER's, not root's"; fi
wait_for_line 120 "$out" "committed step 50/$steps on 4 ranks"
victim=$(ELASTIC_RANK_COMM=python3 elastic_kill_node "$job" 3)
echo "# killed node $victim (slurmd, slurmstepd and rank 3) at $(now)"
wait_for_line 90 "$out" "^saker-run: attempt 2 starting at .* 3 nodes, 3 ranks\)"
assert_contains "$(cat "$out")" "going on at once with 3 of 4 nodes" "the run shrinks onto the 3 surviving nodes"
wait_for_line 90 "$out" "saved by 4 rank\(s\); now 3"
echo "# $(grep -m1 'resumed from commit' "$out")"
it_pass "the 3 ranks resumed the 4 ranks' last commit"

elastic_revive_node "$victim"
wait_for_line 150 "$out" "growing to 4 nodes \\(4 ranks\\) at the ranks. next checkpoint boundary"
assert_eq COMPLETED "$(it_job_wait "$job" 300)" "the job completes"
text=$(cat "$out")
assert_contains "$text" "node $victim is part of job $job again" "Slurm's job expansion gave $victim back to the job"
assert_contains "$text" "saved by 3 rank(s); now 4" "the 4 ranks resumed the 3 ranks' commit"
assert_not_contains "$text" "requeued job" "no requeue"
assert_eq 4 "$(finals "$out" 4 elastic | wc -l)" "the 4 ranks of the last attempt finished"
assert_eq "$want" "$(finals "$out" 4 elastic | awk '{ print $5 }' | sort -u)" \
  "after a shrink to 3 and a grow back to 4 the parameters equal the uninterrupted run's, bit for bit"
it_finish
