#!/usr/bin/env bash
# saker-train --ckpt-every auto, its mechanics end to end under saker-run --local (issue 32,
# item 4; no timing asserted, see goodput_long.sh for the goodput itself):
#   - the interval is chosen and printed with its τ, δ and M, and where M came from;
#   - the failure history is written in the checkpoint directory, 0600, and counts a
#     killed rank and a preemption as interruptions, which then give M;
#   - every rank checkpoints at the same steps (each checkpoint is one collective save of
#     every rank's shard; saker-ckpt verify checks each), spaced by the printed interval;
#   - bad values are refused, naming them.
. "$(dirname "$0")/../integration/lib.sh"
RUN=$SAKER_BUILDDIR/launcher/saker-run/saker-run
TRAIN=$SAKER_BUILDDIR/launcher/saker-train/saker-train
CKPT=$SAKER_BUILDDIR/ckpt/saker-ckpt/saker-ckpt
for b in "$RUN" "$TRAIN" "$CKPT"; do [[ -x $b ]] || { echo "SKIP: $b not built (make check builds it)"; exit 77; }; done
it_tmpdir
W=$IT_TMP
"$TRAIN" make-data --out "$W/data.h5" --samples 512 --features 8 --classes 3 --seed 2 >/dev/null
ARGS=(--data "$W/data.h5" --layers 16 --batch 32 --log-every 100000 --keep 0 --ckpt-every auto)

# 1. --mtbf: the choice is printed with its inputs; checkpoints follow it on both ranks.
assert_rc 0 "2 ranks, --ckpt-every auto --mtbf 40" -- \
  timeout -k 5 120 "$RUN" --local -n 2 --max-restarts 0 --ckpt-dir "$W/c1" -- "$TRAIN" "${ARGS[@]}" --steps 400 \
  --step-sleep-ms 10 --mtbf 40
out=$IT_OUT
line=$(grep -m1 'saker-train: checkpoint every' <<<"$out")
assert_contains "$line" "M=40 s from --mtbf" "the interval is printed with M and its source: $line"
[[ $line =~ checkpoint\ every\ ([0-9]+)\ steps\ \(τ=[0-9.e+-]+\ s\ from\ δ=[0-9.e+-]+\ s ]] &&
  it_pass "the line gives the steps, τ and δ" || it_fail "the line gives the steps, τ and δ: '$line'"
every=${BASH_REMATCH[1]:-0}
chosen=" $(sed -n 's/^saker-train: checkpoint every \([0-9]*\) steps.*/\1/p' <<<"$out" | tr '\n' ' ')"
assert_contains "$out" "failure history $W/c1/goodput-history: attempt 1; 0 interruption(s)" "the history is announced"
assert_eq 600 "$(stat -c %a "$W/c1/goodput-history")" "the failure history is 0600"
assert_contains "$(cat "$W/c1/goodput-history")" "end=done" "the finished attempt is recorded as done"
steps=($(ls "$W/c1" | sed -n 's/^ckpt-0*\([0-9][0-9]*\)\.h5$/\1/p' | sort -n))
it_log "checkpoint steps: ${steps[*]}; intervals chosen:$chosen"
# The first save measures δ, ten steps after the first; the next comes after the first
# choice; every later gap is one of the printed choices; the final step is saved too.
assert_eq 11 "${steps[0]:-}" "the first checkpoint, which measures δ, is at step 11"
assert_eq $((11 + every)) "${steps[1]:-}" "the next one $every steps later, as printed"
assert_eq 400 "${steps[-1]:-}" "the final step is saved"
gaps_ok=1
for ((i = 1; i + 2 < ${#steps[@]}; i++)); do
  [[ $chosen == *" $((steps[i + 1] - steps[i])) "* ]] || gaps_ok=0
done
assert_eq 1 "$gaps_ok" "every gap between periodic checkpoints is a printed choice"
bad=0
for f in "$W"/c1/ckpt-*.h5; do
  [[ $f == *.shard-* ]] && continue
  "$CKPT" verify "$f" >/dev/null 2>&1 || { bad=1; it_log "saker-ckpt verify $f failed"; }
done
assert_eq 0 "$bad" "every checkpoint verifies: both ranks saved each of those steps"

# 2. No --mtbf: a killed rank, then a preemption; each start counts the one before.
# Rank 1 of the first attempt kills itself (SIGKILL) once the first checkpoint exists.
cat >"$W/rank.sh" <<EOF
#!/bin/sh
if [ "\$SAKER_RUN_ATTEMPT" = 1 ] && [ "\$RANK" = 1 ] && [ ! -e "$W/killed" ]; then
  touch "$W/killed"
  ( while ! ls "$W/c2"/ckpt-*.h5 >/dev/null 2>&1; do sleep 0.05; done; kill -9 \$\$ ) &
fi
exec "$TRAIN" "\$@"
EOF
chmod +x "$W/rank.sh"
assert_rc 0 "a rank killed after the first checkpoint: saker-run restarts, and the run finishes" -- \
  timeout -k 5 120 "$RUN" --local -n 2 --max-restarts 2 --ckpt-dir "$W/c2" -- "$W/rank.sh" "${ARGS[@]}" --steps 300 --step-sleep-ms 5
assert_contains "$IT_OUT" "attempt 2; 1 interruption(s)" "the restart counts the killed attempt"
assert_contains "$IT_OUT" "1 crashed or killed, 0 stopped by a signal" "as crashed or killed"
assert_contains "$IT_OUT" "from this job's history (1 interruption(s) in" "M comes from the history, and says so"

# A preemption: SIGTERM once a checkpoint of this run exists; ranks save and exit 75.
rm -rf "$W/c3"
timeout -k 5 120 "$RUN" --local -n 2 --max-restarts 0 --ckpt-dir "$W/c3" -- "$TRAIN" "${ARGS[@]}" --steps 100000 \
  --step-sleep-ms 5 >"$W/pre.out" 2>&1 &
pid=$!
it_wait_for 60 "the run to be preempted has its first checkpoint" sh -c "ls '$W/c3'/ckpt-*.h5"
kill -TERM $pid
wait $pid
assert_eq 75 $? "SIGTERM: emergency checkpoint, saker-run exits 75"
assert_contains "$(cat "$W/c3/goodput-history")" "end=stopped" "the preempted attempt is recorded as stopped"
assert_rc 0 "the requeued run resumes and finishes" -- \
  timeout -k 5 120 "$RUN" --local -n 2 --max-restarts 0 --ckpt-dir "$W/c3" -- "$TRAIN" "${ARGS[@]}" --steps 400
assert_contains "$IT_OUT" "attempt 2; 1 interruption(s)" "the requeued start counts the preemption"
assert_contains "$IT_OUT" "0 crashed or killed, 1 stopped by a signal" "as stopped by a signal"
assert_contains "$IT_OUT" "saker-train: checkpoint every" "and chooses an interval"
assert_eq 600 "$(stat -c %a "$W/c3/goodput-history")" "the history stays 0600 after being replaced"

# 3. Refusals name the value and say what is accepted.
assert_rc 2 "--ckpt-every sometimes is a usage error" -- "$TRAIN" --data "$W/data.h5" --ckpt-every sometimes
assert_contains "$IT_OUT" "--ckpt-every 'sometimes' is not a number of steps nor 'auto'" "naming the value"
assert_rc 2 "--mtbf without --ckpt-every auto is a usage error" -- "$TRAIN" --data "$W/data.h5" --mtbf 100
assert_contains "$IT_OUT" "--mtbf is given without --ckpt-every auto" "saying what it is for"
assert_rc 2 "--mtbf -5 is a usage error" -- "$TRAIN" --data "$W/data.h5" --ckpt-every auto --mtbf -5
assert_contains "$IT_OUT" "--mtbf is '-5': it must be a number from 0.001" "saying what it takes"
assert_rc 0 "--ckpt-every auto without a checkpoint directory trains" -- env -u SAKER_CKPT_DIR "$TRAIN" --data "$W/data.h5" --steps 20 --ckpt-every auto
assert_contains "$IT_OUT" "--ckpt-every auto has no checkpoints to schedule: there is no --ckpt-dir" "and says that nothing is checkpointed"
assert_rc 0 "--help documents --ckpt-every auto and --mtbf" -- "$TRAIN" --help
assert_contains "$IT_OUT" "--mtbf" "--mtbf in --help"
assert_contains "$IT_OUT" "or auto" "auto in --help"
it_finish
