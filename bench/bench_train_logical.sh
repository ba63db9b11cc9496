#!/usr/bin/env bash
# Steady-state step time of saker-train with --logical-ranks equal to the world size (the
# canonical summation order, issue 32 §2) against a saker-train from before it, under
# saker-run --local. Prints each side's median step time and the ratio candidate/baseline
# with its spread over the runs (runs alternate which side goes first, so a drift in the
# machine's load falls on both).
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
    *) sed -n '2,16p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ $# -ge 1 ]] || { sed -n '2,16p' "$0"; exit 2; }
builddir=${SAKER_BUILDDIR:-$(cd "$(dirname "$0")/.." && pwd)}
baseline=$1 candidate=${2:-$builddir/launcher/saker-train/saker-train}
run=${SAKER_RUN:-$builddir/launcher/saker-run/saker-run}
for f in "$baseline" "$candidate" "$run"; do [[ -x $f ]] || { echo "bench_train_logical: $f is not an executable (build it, or pass its path)" >&2; exit 2; }; done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$candidate" make-data --out "$tmp/d.h5" --samples 16384 --features 32 --classes 4 --seed 3 >/dev/null
batch=64 window=50

# step_ms BINARY: one run's steady-state milliseconds per step: "MEDIAN BEST".
step_ms() {
  local env=()
  [[ $transport == ring ]] && env=(SAKER_COMM_TRANSPORT=ring)
  env "${env[@]}" "$run" --local -n "$ranks" -- "$1" --data "$tmp/d.h5" --steps "$steps" --batch $batch \
    --log-every $window --ckpt-every 0 >"$tmp/out" 2>&1 || { cat "$tmp/out" >&2; exit 1; }
  sed -n 's/.* samples\/s \([0-9.]*\) .*/\1/p' "$tmp/out" | tail -n +2 | sort -g |
    awk -v b=$batch '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.4f %.4f\n", 1000 * b / m, 1000 * b / v[NR] }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "bench_train_logical: $ranks rank(s), transport $transport, $runs runs of $steps steps (batch $batch, --layers 64,64)"
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
  awk -v c=$col '{ print $(c + 1) / $c }' "$tmp/pairs" >"$tmp/ratios"
  printf '%s window: baseline %.3f ms/step, candidate %.3f ms/step; ratio candidate/baseline median %.4f (min %.4f, max %.4f) over %d runs\n' \
    "$k" "$(cut -d' ' -f$col "$tmp/pairs" | median)" "$(cut -d' ' -f$((col + 1)) "$tmp/pairs" | median)" \
    "$(median <"$tmp/ratios")" "$(sort -g "$tmp/ratios" | head -1)" "$(sort -g "$tmp/ratios" | tail -1)" "$runs"
done
