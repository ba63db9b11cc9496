#!/usr/bin/env bash
# Elastic training inside one allocation (issue 32): a 4-node saker-train job under
# `saker-run --nodes 2:4` loses a node (its slurmd, slurmstepd and rank SIGKILLed, as a
# crashed machine would), goes on at once with 3 nodes in the same allocation without a
# requeue, loses a second node and goes on with 2, and grows back to 4 nodes when the
# nodes' slurmd return (Slurm's job expansion gives them back, the ranks stop at a
# checkpoint boundary), loses a node again during that grow and shrinks to 3; its final
# weights equal the uninterrupted run's. Refusals: a bad --nodes
# range, MIN above the allocation, and a loss below MIN, which requeues.
# The jobs are an ordinary user's (elastic_lib.sh); root only kills and restarts slurmd.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/train_lib.sh"
source "$(dirname "$0")/elastic_lib.sh"
it_require_root

elastic_cluster_up  # from here on the jobs and runs are the test user's (elastic_lib.sh)

# A bad range is refused before anything starts, naming it (usage: exit 2).
assert_rc 2 "--nodes 4:2 is refused with exit 2" -- it_job "$SAKER_RUN_BIN" --nodes 4:2 -- true
assert_contains "$IT_OUT" "--nodes 4:2: MIN 4 is larger than MAX 2" "the refusal names the range and why"
assert_rc 2 "--nodes x:3 is refused with exit 2" -- it_job "$SAKER_RUN_BIN" --nodes x:3 -- true

logical=$(elastic_logical_args)
if [[ -n $logical ]]; then
  h=$(it_job "$SAKER_RUN_BIN" --local -n 4 -- "$SAKER_TRAIN_BIN" --data "$TRAIN_DATA" $ELASTIC_MODEL_ARGS $logical 2>&1 |
    sed -n 's/^saker-train: weights xxh3_128 \([0-9a-f]*\)$/\1/p')
fi

# --- shrink and grow back -------------------------------------------------------------------
job=$(elastic_submit 4 --nodes 2:4 --resize-wait 30)
out="$IT_PREFIX/elastic-$job.out"
if ((IT_AS_USER)); then assert_eq "$IT_USER" "$(squeue -h -j "$job" -o %u)" "the job is $IT_USER's, not root's"; fi
wait_for_line 90 "$out" "step 75/600"
victim=$(elastic_kill_node "$job" 3)
echo "# killed node $victim (slurmd, slurmstepd and rank 3) at $(now)"
wait_for_line 60 "$out" "^saker-run: attempt 2 starting at .* 3 nodes, 3 ranks\)"
text=$(cat "$out")
assert_contains "$text" "node(s) $victim do not answer" "saker-run found $victim lost while srun still waited for it"
assert_contains "$text" "going on at once with 3 of 4 nodes" "the run shrinks onto the 3 surviving nodes"
assert_contains "$text" "released lost node(s) $victim from job $job" "the lost node leaves the allocation (no DOWN verdict can requeue the job)"
assert_not_contains "$text" "requeued job" "no requeue"
wait_for_line 30 "$out" "recovery breakdown"
decide=$(elastic_breakdown "$out" decide)
echo "# $(grep -m1 'recovery breakdown' "$out")"
assert_eq 1 "$(awk -v d="${decide:-99}" 'BEGIN { print (d < 10) }')" \
  "the next attempt started within 10 s of the detection (decide ${decide:-n/a} s)"
assert_eq "$job" "$(squeue -h -j "$job" -o %i)" "the job is still the same allocation"

# A second loss in a row: rank 2 of the 3-rank attempt, on another node.
victim2=$(elastic_kill_node "$job" 2)
wait_for_line 60 "$out" "^saker-run: attempt 3 starting at .* 2 nodes, 2 ranks\)"
assert_contains "$(cat "$out")" "going on at once with 2 of 3 nodes" "a second loss shrinks the run again, to MIN"
# 22.05 without slurmdbd refuses any update of a job resized before ("the DB index is being
# set"): saker-run says so and goes on (the job was submitted with --no-kill).
# (saker-run releases from a helper process, so that the next attempt need not wait for it.)
it_wait_for 20 "saker-run tried to release $victim2" \
  grep -qE "released lost node\(s\) $victim2 from job|cannot release $victim2 from job" "$out"
if grep -q "cannot release $victim2 from job $job (Job update not available right now" "$out"; then
  echo "# slurmctld refused the second release (22.05 without slurmdbd); $victim2 stays in the job"
  released2=0
else
  assert_contains "$(cat "$out")" "released lost node(s) $victim2 from job $job" "the second lost node leaves the allocation too"
  released2=1
fi

elastic_revive_node "$victim"
elastic_revive_node "$victim2"
wait_for_line 120 "$out" "growing to 4 nodes \\(4 ranks\\) at the ranks. next checkpoint boundary"
# A loss during the grow: $victim's slurmd dies again as soon as saker-run decides to grow
# onto it (the 2-rank attempt is still stopping at its checkpoint boundary, or the 4-rank
# attempt is starting). The run must shrink again instead of hanging on the dead node.
# Root: the machine's crash takes root's slurmd along.
kill -KILL "$(cat "$IT_PREFIX/run/slurmd-$victim.pid")"
echo "# killed $victim's slurmd again during the grow at $(now)"
it_wait_for 150 "a 3-rank attempt after the loss during the grow" \
  eval '(( $(grep -c "^saker-run: attempt [0-9]* starting at .* 3 nodes, 3 ranks)" "$out") >= 2 ))'
text=$(cat "$out")
assert_contains "$text" "node $victim is part of job $job again" "Slurm's job expansion gave $victim back to the job"
if ((released2)); then
  assert_contains "$text" "node $victim2 is part of job $job again" "... and $victim2"
fi
assert_contains "$text" "growing to 4 nodes (4 ranks) at the ranks' next checkpoint boundary" "saker-run asked the ranks to stop at a checkpoint boundary"
assert_contains "$text" "stopped for the grow" "the grow is not a failure"
assert_eq 2 "$(grep -c "node(s) $victim lost: going on at once with 3 of" "$out")" \
  "the loss of $victim during the grow shrinks the run again (the second time $victim is lost)"
assert_eq COMPLETED "$(it_job_wait "$job" 150)" "the job completes"
elastic_revive_node "$victim"
text=$(cat "$out")
assert_contains "$text" ": resized after" "the summary shows the resize"
assert_not_contains "$text" "restart count 1" "never requeued"
if [[ -n $logical ]]; then
  assert_eq "$h" "$(hash_of "$out")" "after two shrinks, a grow and a loss during it the weights equal the uninterrupted 4-rank run's, bit for bit"
else
  echo "# saker-train has no --logical-ranks here: the final hash after a resize is not compared"
fi

# --- refusals -------------------------------------------------------------------------------
# MIN above the allocation: refused naming it, nothing started (exit 2).
bad=$(sbatch --parsable -p all -N2 -D "$IT_PREFIX" -o "$IT_PREFIX/bad-%j.out" --wrap "$SAKER_RUN_BIN --nodes 3:4 -- true")
it_job_wait "$bad" 60 >/dev/null
assert_contains "$(cat "$IT_PREFIX/bad-$bad.out")" "job $bad has 2 node(s), fewer than MIN 3" "MIN above the allocation is refused naming it"
assert_contains "$(scontrol show job "$bad")" "ExitCode=2:0" "... with exit 2"

# A loss below MIN requeues the job off the lost node.
job=$(elastic_submit 2 --nodes 2:4)
out="$IT_PREFIX/elastic-$job.out"
wait_for_line 90 "$out" "step 50/600"
victim=$(elastic_kill_node "$job" 1)
it_wait_for 60 "job $job requeued after losing $victim" grep -q "requeued job $job" "$out"
assert_contains "$(cat "$out")" "1 node(s) left, below --nodes MIN 2" "below MIN the reason says so"
it_job scancel "$job"  # the user ends the requeued job
elastic_revive_node "$victim"
it_finish
