#!/usr/bin/env bash
# sbatch throughput through a real slurmctld with job_submit/saker vs without it, in the
# same run (target: >= 0.95x). Each side submits N held jobs that declare a dataset
# (the plugin evaluates, routes and audits each one), alternating sides in rounds so
# that machine noise hits both alike.
set -euo pipefail
SRC=${SAKER_SRCDIR:-%%SAKER_SRCDIR%%}
BUILD=${SAKER_BUILDDIR:-%%SAKER_BUILDDIR%%}
N=${SAKER_BENCH_JOBS:-300}
ROUNDS=3
[[ $(id -u) == 0 ]] || { echo "bench_sbatch_throughput: needs root (real Slurm daemons); skipped"; exit 0; }
policy="$SRC/tests/data/policy/two_zones.yaml"
parts="gpu-ae=saker[1-2];cpu-ae=saker[1-2];gpu-eu=saker3"
declare -A total=([with]=0 [without]=0)
run_side() {  # run_side with|without -> seconds for N submissions
  local side=$1 prefix port extra=()
  prefix=$(mktemp -d /tmp/saker-bench-XXXXXX)
  port=$((49000 + RANDOM % 800))
  [[ $side == without ]] && extra=(--no-job-submit)
  if ! "$SRC/scripts/saker-cluster" up --prefix "$prefix" --port-base "$port" --build-dir "$BUILD" --nodes 3 \
    --policy "$policy" --partitions "$parts" "${extra[@]}" >"$prefix.log" 2>&1; then
    cat "$prefix.log" >&2
    echo "bench_sbatch_throughput: the cluster did not come up (above)" >&2
    exit 1
  fi
  rm -f "$prefix.log"
  export SLURM_CONF=$prefix/etc/slurm.conf
  scontrol update NodeName='saker[1-2]' AvailableFeatures=lustre-ae ActiveFeatures=lustre-ae
  local start end
  start=$(date +%s.%N)
  for ((i = 0; i < N; i++)); do sbatch --hold -A medical --dataset=patients@v3 -o /dev/null --wrap true >/dev/null; done
  end=$(date +%s.%N)
  "$SRC/scripts/saker-cluster" down --prefix "$prefix" >/dev/null
  rm -rf "$prefix"
  echo "$end - $start" | bc -l
}
ROUNDS=${SAKER_BENCH_ROUNDS:-$ROUNDS}
for ((r = 1; r <= ROUNDS; r++)); do
  # Alternate who goes first, so that drift in the machine's load hits both sides alike.
  order=(without with)
  ((r % 2 == 0)) && order=(with without)
  for side in "${order[@]}"; do
    s=$(run_side $side) || exit 1
    total[$side]=$(echo "${total[$side]} + $s" | bc -l)
    printf 'round %d %-8s %4d jobs in %6.2f s = %7.1f jobs/s\n' "$r" "$side" "$N" "$s" "$(echo "$N / $s" | bc -l)"
  done
done
with=$(echo "$N * $ROUNDS / ${total[with]}" | bc -l)
without=$(echo "$N * $ROUNDS / ${total[without]}" | bc -l)
ratio=$(echo "$with / $without" | bc -l)
printf 'sbatch throughput: with job_submit/saker %.1f jobs/s, without %.1f jobs/s, ratio %.3f [target >= 0.95: %s]\n' \
  "$with" "$without" "$ratio" "$(echo "$ratio >= 0.95" | bc -l | sed 's/1/MET/;s/0/MISSED/')"
