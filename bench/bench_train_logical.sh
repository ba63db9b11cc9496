#!/usr/bin/env bash
# Steady-state step time of saker-train with --logical-ranks equal to the world size (the
# canonical summation order, issue 32 §2) against the same run from before it (a build
# without logical ranks, whose ranks sum with the transport's own allreduce), under
# saker-run --local. The runs are interleaved in pairs, each pair in the other order from
# the one before (AB BA AB ...: a load that drifts linearly adds as much to each side of a
# pair); each pair gives one ratio candidate/baseline. Prints each side's median step
# time and the ratios' median, quartiles, min and max over the runs (5 at least), with the
# same figures for baseline against baseline (run i+1 over run i): the noise floor, which
# says whether a difference of 2% (the issue's target) can be told apart on this machine.
# Where the machine's noise is wider than that, the last lines resolve it: the only work a
# step does differently, the gradient sum, timed alone (bench_train_logical_sum, both sums
# in interleaved blocks in one process per rank) and set against the baseline's step time.
#
#   bench/bench_train_logical.sh [-n RANKS] [-r RUNS] [-s STEPS] [-t auto|ring] BASELINE [CANDIDATE]
#
# BASELINE: a saker-train built before the canonical order (e.g. a build of 433f9d2^);
# CANDIDATE: default $SAKER_BUILDDIR/launcher/saker-train/saker-train. -t ring forces both
# onto the TCP ring that ranks on separate nodes use (SAKER_COMM_TRANSPORT=ring); auto
# (the default) leaves the baseline its shared-memory path on one node. Per run, from the
# per-window samples/s saker-train prints (--log-every 50), leaving out the first window
# (start-up, first connections): the median window's step time, and the best window's
# (on a machine others load, the best window is the one least disturbed by them).
set -euo pipefail
ranks=4 runs=7 steps=600 transport=auto
while getopts "n:r:s:t:" o; do
  case $o in
    n) ranks=$OPTARG ;; r) runs=$OPTARG ;; s) steps=$OPTARG ;; t) transport=$OPTARG ;;
    *) sed -n '2,19p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ $# -ge 1 ]] || { sed -n '2,19p' "$0"; exit 2; }
((runs >= 5)) || { echo "bench_train_logical: -r $runs: a spread needs at least 5 runs; pass -r 5 or more" >&2; exit 2; }
builddir=${SAKER_BUILDDIR:-$(cd "$(dirname "$0")/.." && pwd)}
baseline=$1 candidate=${2:-$builddir/launcher/saker-train/saker-train}
run=${SAKER_RUN:-$builddir/launcher/saker-run/saker-run}
for f in "$baseline" "$candidate" "$run"; do [[ -x $f ]] || { echo "bench_train_logical: $f is not an executable (build it, or pass its path)" >&2; exit 2; }; done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$candidate" make-data --out "$tmp/d.h5" --samples 16384 --features 32 --classes 4 --seed 3 >/dev/null
batch=64 window=50

# step_ms BINARY: one run's steady-state milliseconds per step: "MEDIAN BEST".
env=()
[[ $transport == ring ]] && env=(SAKER_COMM_TRANSPORT=ring)
step_ms() {
  env "${env[@]}" "$run" --local -n "$ranks" -- "$1" --data "$tmp/d.h5" --steps "$steps" --batch $batch \
    --log-every $window --ckpt-every 0 >"$tmp/out" 2>&1 || { cat "$tmp/out" >&2; exit 1; }
  sed -n 's/.* samples\/s \([0-9.]*\) .*/\1/p' "$tmp/out" | tail -n +2 | sort -g |
    awk -v b=$batch '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.4f %.4f\n", 1000 * b / m, 1000 * b / v[NR] }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# spread: "median p25 p75 min max" of the numbers on stdin (quartiles by linear interpolation).
spread() {
  sort -g | awk 'function q(p,  h, i) { h = 1 + (NR - 1) * p; i = int(h); return v[i] + (h - i) * (v[i + 1] - v[i]) }
    { v[NR] = $1 } END { v[NR + 1] = v[NR]; printf "%.4f %.4f %.4f %.4f %.4f\n", q(0.5), q(0.25), q(0.75), v[1], v[NR] }'
}

echo "bench_train_logical: $ranks rank(s), transport $transport, $runs runs of $steps steps (batch $batch, --layers 64,64); load average $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq 1 "$runs"); do
  if ((i % 2)); then b=$(step_ms "$baseline"); c=$(step_ms "$candidate"); else c=$(step_ms "$candidate"); b=$(step_ms "$baseline"); fi
  read -r bm bb <<<"$b"
  read -r cm cb <<<"$c"
  echo "$bm $cm $bb $cb" >>"$tmp/pairs"
  printf '  run %d: median window baseline %.3f, candidate %.3f ms/step (ratio %.4f); best window %.3f, %.3f (ratio %.4f)\n' \
    "$i" "$bm" "$cm" "$(echo "$cm / $bm" | bc -l)" "$bb" "$cb" "$(echo "$cb / $bb" | bc -l)"
done
for k in median best; do
  col=1 && [[ $k == best ]] && col=3
  awk -v c=$col '{ print $(c + 1) / $c }' "$tmp/pairs" | spread >"$tmp/ab"
  # The noise floor: each baseline run over the one before it (same binary, same settings).
  cut -d' ' -f$col "$tmp/pairs" | awk 'NR > 1 { print $1 / prev } { prev = $1 }' | spread >"$tmp/aa"
  read -r m q1 q3 lo hi <"$tmp/ab"
  read -r am aq1 aq3 alo ahi <"$tmp/aa"
  printf '%s window: baseline %.3f ms/step, candidate %.3f ms/step over %d runs\n' "$k" \
    "$(cut -d' ' -f$col "$tmp/pairs" | median)" "$(cut -d' ' -f$((col + 1)) "$tmp/pairs" | median)" "$runs"
  printf '  candidate/baseline: median %.4f, quartiles %.4f..%.4f, min %.4f, max %.4f\n' "$m" "$q1" "$q3" "$lo" "$hi"
  printf '  baseline/baseline (noise floor): median %.4f, quartiles %.4f..%.4f, min %.4f, max %.4f\n' "$am" "$aq1" "$aq3" "$alo" "$ahi"
done
# The sum alone: saker-train's gradient for these settings (6532 parameters) and its 4 extra values.
sum_bin=$builddir/bench/bench_train_logical_sum
if [[ -x $sum_bin ]]; then
  line=$(env "${env[@]}" "$run" --local -n "$ranks" -- "$sum_bin" 6536 | grep '^floats ') || { echo "bench_train_logical: $sum_bin failed" >&2; exit 1; }
  read -r _ floats _ _ _ path _ pairs _ block _ pm p1 p3 _ cm c1 c3 _ dm d1 d3 _ <<<"$line"  # _: the fields after (nodes, baseline)
  base_ms=$(cut -d' ' -f1 "$tmp/pairs" | median)
  printf 'the sum alone (%s floats, %s path, %s pairs of %s-call blocks): transport allreduce %.2f us (quartiles %.2f..%.2f), canonical order %.2f us (%.2f..%.2f)\n' \
    "$floats" "$path" "$pairs" "$block" "$pm" "$p1" "$p3" "$cm" "$c1" "$c3"
  printf '  canonical minus transport per step: median %.2f us (quartiles %.2f..%.2f) = %+.3f%% (%+.3f%%..%+.3f%%) of the baseline median step (%.3f ms); target within 2%%\n' \
    "$dm" "$d1" "$d3" "$(echo "$dm / ($base_ms * 10)" | bc -l)" "$(echo "$d1 / ($base_ms * 10)" | bc -l)" \
    "$(echo "$d3 / ($base_ms * 10)" | bc -l)" "$base_ms"
else
  echo "($sum_bin is not built: make bench/bench_train_logical_sum for the sum alone)"
fi
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
