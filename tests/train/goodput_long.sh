#!/usr/bin/env bash
# Goodput with --ckpt-every auto (issue 32, item 4): a 20-minute saker-run --local run of
# saker-train with an interruption every 5 minutes keeps at least 90% of the useful steps
# per hour of the same run without interruptions.
#
# How it is measured: both runs (4 ranks each, same data, model and settings) run side
# by side on this machine for the same wall-clock time, so both see the same load; at
# the end each gets SIGTERM (an emergency checkpoint) and its useful steps are the step
# of its newest committed checkpoint: the progress a resumed run would continue from.
# Useful steps per hour = that step / the wall-clock hours from its first launch to its
# end (restarts, relaunches and redone steps included).
#
# The interrupted run's interruptions, at 5, 10 and 15 minutes:
#   1. a killed rank (SIGKILL to rank 1): saker-run restarts the attempt;
#   2. a preemption (SIGTERM to saker-run): emergency checkpoint, exit 75, and the job is
#      launched again at once as a requeue would (saker-run --local does not requeue);
#   3. a lost node, as far as --local allows: ranks 2 and 3 (the second "node") killed at
#      once (SIGKILL); saker-run restarts the attempt.
# No --mtbf: M comes from the run's own failure history, which the output shows.
# SAKER_TEST_FULL=1 only (scripts/check --full); SAKER_GOODPUT_MINUTES shortens it for a try.
. "$(dirname "$0")/../integration/lib.sh"
if [[ ${SAKER_TEST_FULL:-0} != 1 ]]; then
  echo "SKIP: a 20-minute goodput run; runs with SAKER_TEST_FULL=1 (scripts/check --full)"
  exit 77
fi
RUN=$SAKER_BUILDDIR/launcher/saker-run/saker-run
TRAIN=$SAKER_BUILDDIR/launcher/saker-train/saker-train
for b in "$RUN" "$TRAIN"; do [[ -x $b ]] || { echo "SKIP: $b not built (make check builds it)"; exit 77; }; done
MINUTES=${SAKER_GOODPUT_MINUTES:-20}
TOTAL=$((MINUTES * 60))
PERIOD=$((TOTAL / 4))
RANKS=4
it_tmpdir
W=$IT_TMP
"$TRAIN" make-data --out "$W/data.h5" --samples 4096 --features 16 --classes 4 --seed 3 >/dev/null
ARGS=(--data "$W/data.h5" --layers 64,64 --batch 64 --steps 1000000000 --log-every 1000 --keep 2
      --ckpt-every auto --step-sleep-ms 20)

# drive NAME: launches the run until NAME.stop exists; a preempted launch (exit 75) is
# launched again at once, like a requeue. Each launch's saker-run pid goes to NAME.pid.
drive() {
  local name=$1 rc
  date +%s.%N >"$W/$name.t0"
  while :; do
    "$RUN" --local -n $RANKS --max-restarts 5 --ckpt-dir "$W/$name" -- "$TRAIN" "${ARGS[@]}" >>"$W/$name.out" 2>&1 &
    echo $! >"$W/$name.pid"
    wait $!
    rc=$?
    echo "$(date +%s.%N) exit $rc" >>"$W/$name.launches"
    [[ -e $W/$name.stop ]] && break
    [[ $rc == 75 ]] || break
  done
  date +%s.%N >"$W/$name.t1"
}

# rank_pids NAME RANK...: the pids of those ranks of NAME's current saker-run.
rank_pids() {
  local name=$1 c r
  shift
  for c in $(pgrep -P "$(cat "$W/$name.pid")"); do
    r=$(tr '\0' '\n' <"/proc/$c/environ" 2>/dev/null | sed -n 's/^RANK=//p')
    for want in "$@"; do [[ $r == "$want" ]] && echo "$c"; done
  done
}

# kill_ranks NAME SIGNAL RANK...: once every named rank runs, signals them at once.
kill_ranks() {
  local name=$1 sig=$2 pids deadline=$((SECONDS + 120))
  shift 2
  while :; do
    pids=$(rank_pids "$name" "$@")
    (( $(wc -w <<<"$pids") == $# )) && break
    (( SECONDS < deadline )) || { it_fail "ranks $* of $name to kill never all ran"; return; }
    sleep 0.2
  done
  kill "-$sig" $pids
  it_log "$(date +%T): SIG$sig to rank(s) $* of $name (pids $(tr '\n' ' ' <<<"$pids"))"
}

started=$SECONDS
drive free &
free_driver=$!
drive faulty &
faulty_driver=$!
it_log "two runs side by side, ${MINUTES} min each: 'free' (no interruption) and 'faulty' (one every $PERIOD s)"
at() { local t=$1; while (( SECONDS - started < t )); do sleep 1; done; }
at $PERIOD
kill_ranks faulty KILL 1
at $((2 * PERIOD))
kill -TERM "$(cat "$W/faulty.pid")"
it_log "$(date +%T): SIGTERM to faulty's saker-run (a preemption; launched again at once)"
at $((3 * PERIOD))
kill_ranks faulty KILL 2 3
at $TOTAL
touch "$W/free.stop" "$W/faulty.stop"
kill -TERM "$(cat "$W/free.pid")" "$(cat "$W/faulty.pid")"
it_log "$(date +%T): SIGTERM to both: each takes its final emergency checkpoint"
wait $free_driver $faulty_driver

newest_step() { ls "$W/$1" | sed -n 's/^ckpt-0*\([0-9][0-9]*\)\.h5$/\1/p' | sort -n | tail -n 1; }
rate() {  # useful steps per hour of run NAME
  awk -v s="$(newest_step "$1")" -v a="$(cat "$W/$1.t0")" -v b="$(cat "$W/$1.t1")" 'BEGIN { printf "%.0f", s * 3600 / (b - a) }'
}
it_log "measured: useful steps = the step of the newest committed checkpoint after the final SIGTERM (its emergency checkpoint); per hour of wall-clock time from the first launch to the end; both runs side by side"
free_rate=$(rate free)
faulty_rate=$(rate faulty)
it_log "free: newest checkpoint step $(newest_step free) after $(awk -v a="$(cat "$W/free.t0")" -v b="$(cat "$W/free.t1")" 'BEGIN { printf "%.0f", b - a }') s: $free_rate useful steps/hour"
it_log "faulty: newest checkpoint step $(newest_step faulty) after $(awk -v a="$(cat "$W/faulty.t0")" -v b="$(cat "$W/faulty.t1")" 'BEGIN { printf "%.0f", b - a }') s: $faulty_rate useful steps/hour"
it_log "faulty's launches: $(tr '\n' ';' <"$W/faulty.launches")"
grep -h 'saker-train: checkpoint every\|failure history\|saker-run: restart' "$W/faulty.out" | sed 's/^/# faulty | /'
grep -h 'saker-train: checkpoint every' "$W/free.out" | sed 's/^/# free | /'

out=$(cat "$W/faulty.out")
assert_contains "$out" "attempt 2; 1 interruption(s)" "the killed rank counts as an interruption"
assert_contains "$out" "attempt 3; 2 interruption(s) in" "so does the preemption"
assert_contains "$out" "attempt 4; 3 interruption(s) in" "and the lost node (ranks 2 and 3)"
assert_contains "$out" "(1 crashed or killed, 1 stopped by a signal)" "each of its kind"
assert_contains "$out" "M=" "the chosen interval prints M"
assert_contains "$out" "from this job's history (3 interruption(s) in" "M from the job's own failure history after the third"
assert_contains "$(cat "$W/free.out")" "from the prior of one interruption an hour" "the failure-free run uses the prior"
ok=$(awk -v f="$free_rate" -v g="$faulty_rate" 'BEGIN { print (f > 0 && g >= 0.9 * f) ? 1 : 0 }')
ratio=$(awk -v f="$free_rate" -v g="$faulty_rate" 'BEGIN { if (f > 0) printf "%.1f", 100 * g / f; else print "n/a" }')
assert_eq 1 "$ok" "goodput: $faulty_rate useful steps/hour with an interruption every $PERIOD s, $ratio% of the failure-free run's $free_rate (>= 90%)"
it_finish
