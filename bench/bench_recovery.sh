#!/usr/bin/env bash
# Recovery after a lost node, elastic (issue 32 §5 and its speed target: detection to first
# step after a shrink <= 10 s, <= 5 s excluding detection). One local 4-node cluster; each
# round submits a 4-node saker-train job under `saker-run --nodes 2:4`, SIGKILLs one node's
# slurmd, slurmstepd and rank mid-run, and reads saker-run's recovery breakdown (detect,
# decide, respawn, rendezvous, restore, first step). Prints every round's line, then the
# median, min and max of: kill to the first step after the shrink (the test's clock and
# saker-train's "first step after resume" line), and saker-run's total minus detect.
#
# Run from a build tree, as root:  SAKER_SRCDIR=.. SAKER_BUILDDIR=. bash ../bench/bench_recovery.sh
# Env: SAKER_BENCH_ROUNDS (default 5).
set -uo pipefail
ROUNDS=${SAKER_BENCH_ROUNDS:-5}
[[ $(id -u) == 0 ]] || { echo "bench_recovery: needs root (real Slurm daemons); skipped"; exit 0; }
SAKER_SRCDIR=${SAKER_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
IT_NAME=bench_recovery
source "$SAKER_SRCDIR/tests/integration/lib.sh"
source "$SAKER_SRCDIR/tests/integration/train_lib.sh"
source "$SAKER_SRCDIR/tests/integration/elastic_lib.sh"
elastic_cluster_up >/dev/null

kill_to_first=() saker_side=()
for ((r = 1; r <= ROUNDS; r++)); do
  job=$(elastic_submit 4 --nodes 2:4)
  out="$IT_PREFIX/elastic-$job.out"
  wait_for_line 90 "$out" "step 50/600" >/dev/null || { echo "round $r: the job did not reach step 50"; continue; }
  t_kill=$(now)
  victim=$(elastic_kill_node "$job" 3)
  if ! wait_for_line 60 "$out" "recovery breakdown" >/dev/null; then
    echo "round $r: no recovery breakdown (see $out)"
  else
    line=$(grep -m1 'recovery breakdown' "$out" | sed 's/^saker: saker-run: //')
    t_first=$(sed -n 's/^saker-train: first step after resume: step [0-9]* at \([0-9.]*\)$/\1/p' "$out" | head -n 1)
    k=$(awk -v a="$t_first" -v b="$t_kill" 'BEGIN { printf "%.2f", a - b }')
    total=$(elastic_breakdown "$out" total)
    detect=$(elastic_breakdown "$out" detect)
    s=$(awk -v t="$total" -v d="$detect" 'BEGIN { printf "%.2f", t - d }')
    kill_to_first+=("$k")
    saker_side+=("$s")
    echo "round $r: node $victim: kill to first step $k s; $line"
  fi
  scancel "$job"
  it_job_wait "$job" 60 >/dev/null
  elastic_revive_node "$victim"
  it_wait_for 60 "node $victim idle" bash -c "sinfo -h -n $victim -o %t | grep -qx idle" >/dev/null
done

stats() {  # median min max of the arguments
  printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) { print "n/a"; exit }
    printf "median %.2f, min %.2f, max %.2f (%d rounds)", v[int((NR + 1) / 2)], v[1], v[NR], NR }'
}
echo "kill to first step after the shrink (s): $(stats "${kill_to_first[@]}")"
echo "saker-run's recovery excluding detection (s): $(stats "${saker_side[@]}")"
