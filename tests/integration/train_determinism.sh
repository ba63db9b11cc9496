#!/usr/bin/env bash
# saker-train is deterministic across world sizes and transports (issue 32 §2): a run of 4
# logical workers ends with the same final weight hash
#  - on 4 ranks over shared memory (saker-run --local -n 4) and over the TCP ring that
#    ranks on separate nodes use (SAKER_COMM_TRANSPORT=ring, and 4 nodes of a real cluster),
#    and on 2 nodes x 2 ranks (shared memory inside a node, TCP between);
#    before the canonical order, shared memory summed in rank order and these differed;
#  - on 3 and 2 ranks (--logical-ranks 4);
#  - through a resize: stopped by SIGTERM on 4 ranks (exit 75, emergency checkpoint),
#    resumed on 3 and stopped there by saker-run's resize notice (SAKER_RESIZE_NOTICE),
#    then finished on 4.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/train_lib.sh"
it_tmpdir
# The runs are an ordinary user's (issue 28) where we may switch to one (root); else ours.
if [[ $(id -u) == 0 ]]; then it_jobs_as_user; fi
IT_PREFIX=$IT_TMP train_setup
args=(--data "$TRAIN_DATA" $TRAIN_MODEL_ARGS)

# run_local NAME N [ARGS...]: saker-run --local -n N saker-train ...; output in $IT_TMP/NAME.out.
run_local() {
  local name=$1 n=$2
  shift 2
  it_job "$SAKER_RUN_BIN" --local -n "$n" -- "$SAKER_TRAIN_BIN" "${args[@]}" "$@" >"$IT_TMP/$name.out" 2>&1
}

run_local shm 4
h=$(hash_of "$IT_TMP/shm.out")
assert_eq 32 "${#h}" "saker-run --local -n 4 prints a 128-bit weight hash"
assert_contains "$(cat "$IT_TMP/shm.out")" "over 4 rank(s) as 4 logical worker(s)" "L defaults to the first world size"

SAKER_COMM_TRANSPORT=ring run_local ring 4
assert_eq "$h" "$(hash_of "$IT_TMP/ring.out")" \
  "4 ranks over the TCP ring (the transport between nodes) end with the shared-memory hash"

for n in 3 2 1; do
  run_local "n$n" "$n" --logical-ranks 4
  assert_eq "$h" "$(hash_of "$IT_TMP/n$n.out")" "4 logical workers on $n rank(s) end with the 4-rank hash"
done
run_local n5 5 --logical-ranks 4
assert_contains "$(cat "$IT_TMP/n5.out")" "5 ranks for 4 logical workers" "more ranks than logical workers are refused, naming both"

# The resize: SIGTERM on 4 ranks once past step 75 (progress lines every 25 steps).
ck=$IT_TMP/ckpt
user_bg "$IT_TMP/r1.pid" "$SAKER_RUN_BIN" --local -n 4 --ckpt-dir "$ck" -- "$SAKER_TRAIN_BIN" "${args[@]}" \
  --step-sleep-ms 40 >"$IT_TMP/r1.out" 2>&1
bg=$!
wait_for_line 120 "$IT_TMP/r1.out" "step 75/200"
kill -TERM "$(bg_pid "$IT_TMP/r1.pid")"
wait "$bg" && rc=0 || rc=$?
assert_eq 75 "$rc" "SIGTERM on 4 ranks: exit 75"
assert_contains "$(cat "$IT_TMP/r1.out")" "emergency checkpoint of step" "after an emergency checkpoint"

# On 3 ranks (L stays 4, from the checkpoint), saker-run's resize notice past step 125.
notice=$IT_TMP/resize-notice
# saker-run exports its own notice path (in its private run directory) to the ranks; the
# test stands in for saker-run's grow by giving the ranks one it can write (as the job's user,
# as saker-run would).
it_job "$SAKER_RUN_BIN" --local -n 3 --ckpt-dir "$ck" -- env SAKER_RESIZE_NOTICE="$notice" "$SAKER_TRAIN_BIN" "${args[@]}" \
  --step-sleep-ms 40 >"$IT_TMP/r2.out" 2>&1 &
bg=$!
wait_for_line 120 "$IT_TMP/r2.out" "step 125/200"
it_job sh -c 'echo 4 >"$1.tmp" && mv "$1.tmp" "$1"' sh "$notice"
wait "$bg" && rc=0 || rc=$?
r2=$(cat "$IT_TMP/r2.out")
assert_eq 75 "$rc" "the resize notice on 3 ranks: exit 75"
assert_contains "$r2" "over 3 rank(s) as 4 logical worker(s)" "the resumed run keeps the checkpoint's 4 logical workers on 3 ranks"
assert_contains "$r2" "resharded from world size 4" "its checkpoint was written by 4 ranks"
assert_contains "$r2" "saker-train: resize notice $notice (world size 4, now 3): checkpoint at step" "saker-train names the notice"
assert_contains "$r2" "ranks took an emergency checkpoint" "and leaves the preemption marker saker-run reads"

# Back on 4 ranks: the notice (world size 4) is now the run's own size and is ignored.
SAKER_RESIZE_NOTICE=$notice it_job "$SAKER_RUN_BIN" --local -n 4 --ckpt-dir "$ck" -- "$SAKER_TRAIN_BIN" "${args[@]}" \
  >"$IT_TMP/r3.out" 2>&1 && rc=0 || rc=$?
assert_eq 0 "$rc" "finished on 4 ranks"
assert_eq "$h" "$(hash_of "$IT_TMP/r3.out")" "4 -> SIGTERM -> 3 -> resize notice -> 4 ends with the uninterrupted run's hash"

# 4 nodes of a real cluster, one rank each (TCP ring, PMI2 bootstrap) when we may run one.
if [[ $(id -u) == 0 ]]; then
  it_cluster_up --nodes 4 --gpus-per-node 0 --cpus-per-node 2 --no-job-submit
  it_jobs_as_user   # again: the cluster's prefix must be open to the user for the job's files
  job=$(submit_template train-cpu "$IT_PREFIX/ckpt-4n" -p all -N4 --ntasks=4 --ntasks-per-node=1)
  assert_eq COMPLETED "$(it_job_wait "$job" 180)" "the 4-node job completes"
  assert_eq "$h" "$(hash_of "$IT_PREFIX/train-cpu-$job.out")" "4 nodes of the local cluster end with the --local -n 4 hash"
  # 2 nodes x 2 ranks: automatic transport would be hierarchical (shared memory inside a
  # node, then the ring among node leaders), a third summation order before.
  job=$(submit_template train-cpu "$IT_PREFIX/ckpt-2x2" -p all -N2 --ntasks=4 --ntasks-per-node=2)
  assert_eq COMPLETED "$(it_job_wait "$job" 180)" "the 2-node, 4-rank job completes"
  assert_eq "$h" "$(hash_of "$IT_PREFIX/train-cpu-$job.out")" "2 nodes x 2 ranks end with the --local -n 4 hash"
else
  it_log "not root: the 4-node cluster comparison is skipped (the TCP-ring comparison above stands in for it)"
fi
it_finish
