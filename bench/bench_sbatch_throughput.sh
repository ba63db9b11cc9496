#!/usr/bin/env bash
# sbatch throughput through a real slurmctld with job_submit/saker vs without it, in the
# same run (target: >= 0.95x). Each side gets a fresh 3-node cluster of the same shape and
# submits the same N held jobs that declare a dataset (with the plugin, each one is
# evaluated, routed to gpu-ae + feature lustre-ae, audited and indexed). Sides alternate
# in rounds, and who goes first alternates too, so that drift in the machine's load hits
# both alike.
#
# Also printed: the CPU time slurmctld and munged spent per job, from the first sbatch
# until 1 s after the last one, so that the plugin's deferred work (the audit log's group
# commit, the index sweep) is counted. CPU time is far less noisy than wall time on a
# shared machine, and shows what the plugin costs the controller.
#
# Env: SAKER_BENCH_JOBS (default 300), SAKER_BENCH_ROUNDS (default 4).
set -euo pipefail
SRC=${SAKER_SRCDIR:-%%SAKER_SRCDIR%%}
BUILD=${SAKER_BUILDDIR:-%%SAKER_BUILDDIR%%}
N=${SAKER_BENCH_JOBS:-300}
ROUNDS=${SAKER_BENCH_ROUNDS:-4}
[[ $(id -u) == 0 ]] || { echo "bench_sbatch_throughput: needs root (real Slurm daemons); skipped"; exit 0; }
policy="$SRC/tests/data/policy/two_zones.yaml"
parts="gpu-ae=saker[1-2];cpu-ae=saker[1-2];gpu-eu=saker3"
ticks=$(getconf CLK_TCK)
scratch=$(mktemp -d /tmp/saker-bench-XXXXXX)
chmod 755 "$scratch"  # munged wants every directory above its socket searchable
prefix=""
cleanup() {
  [[ -z $prefix ]] || "$SRC/scripts/saker-cluster" down --prefix "$prefix" >/dev/null 2>&1 || true
  rm -rf "$scratch"
}
trap cleanup EXIT

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }  # utime + stime, all threads

# cluster_up with|without: a fresh cluster in $prefix. Ports below the ephemeral range
# (32768) and below the integration tests' (30000 up): no outgoing connection takes them.
cluster_up() {
  local side=$1 extra=() port rc attempt
  [[ $side == without ]] && extra=(--no-job-submit)
  prefix=$(mktemp -d "$scratch/cluster-XXXXXX")
  for attempt in 1 2 3 4 5; do
    port=$((24000 + RANDOM % 5900))
    "$SRC/scripts/saker-cluster" up --prefix "$prefix" --port-base "$port" --build-dir "$BUILD" --nodes 3 \
      --policy "$policy" --partitions "$parts" "${extra[@]}" >"$scratch/up.log" 2>&1 && rc=0 || rc=$?
    ((rc == 4)) || break  # 4: a port of the range was busy; try another
  done
  if ((rc != 0)); then
    cat "$scratch/up.log" >&2
    echo "bench_sbatch_throughput: the cluster did not come up (above)" >&2
    exit 1
  fi
  export SLURM_CONF=$prefix/etc/slurm.conf
  scontrol update NodeName='saker[1-2]' AvailableFeatures=lustre-ae ActiveFeatures=lustre-ae
}

cluster_down() {
  "$SRC/scripts/saker-cluster" down --prefix "$prefix" >/dev/null
  prefix=""
}

# The plugin must have done its work on every job, or the comparison means nothing.
check_side() {
  local side=$1 said routed audited
  said=$(grep -c "saker: partition set to gpu-ae" "$scratch/sbatch.err" || true)
  routed=$(squeue -h -t PD -o '%P %f' | grep -c '^gpu-ae lustre-ae$' || true)
  if [[ $side == with ]]; then
    audited=$(grep -c '"event":"submit"' "$prefix/etc/saker-audit.log" || true)
    if ((said != N || routed != N || audited != N)); then
      echo "bench_sbatch_throughput: with job_submit/saker, $said of $N sbatch said 'partition set', $routed jobs" \
        "were routed, $audited were audited; expected $N each" >&2
      exit 1
    fi
  elif ((said != 0)); then
    echo "bench_sbatch_throughput: job_submit/saker answered on the side without it" >&2
    exit 1
  fi
}

# run_side with|without: sets side_wall (seconds for N submissions) and side_cpu (ms/job).
# Runs in this shell (not a $(...) subshell), so that the EXIT trap can take its cluster down.
run_side() {
  local side=$1 ctld munged c0 m0 start end c1 m1 i
  cluster_up "$side"
  ctld=$(cat "$prefix/run/slurmctld.pid")
  munged=$(cat "$prefix/munge/munged.pid")
  c0=$(cpu_ticks "$ctld")
  m0=$(cpu_ticks "$munged")
  start=$EPOCHREALTIME
  for ((i = 0; i < N; i++)); do
    sbatch --hold -A medical --dataset=patients@v3 -o /dev/null --wrap true >/dev/null 2>>"$scratch/sbatch.err"
  done
  end=$EPOCHREALTIME
  sleep 1
  c1=$(cpu_ticks "$ctld")
  m1=$(cpu_ticks "$munged")
  check_side "$side"
  rm -f "$scratch/sbatch.err"
  cluster_down
  side_wall=$(echo "$end - $start" | bc -l)
  side_cpu=$(echo "($c1 - $c0 + $m1 - $m0) * 1000 / $ticks / $N" | bc -l)
}

declare -A wall=([with]=0 [without]=0) cpu=([with]=0 [without]=0) this
ratios=()
printf 'sbatch throughput: %d held jobs per side and round, %d rounds; CPU = slurmctld + munged per job\n' "$N" "$ROUNDS"
for ((r = 1; r <= ROUNDS; r++)); do
  order=(without with)
  ((r % 2 == 0)) && order=(with without)
  for side in "${order[@]}"; do
    run_side "$side"
    s=$side_wall c=$side_cpu
    this[$side]=$s
    wall[$side]=$(echo "${wall[$side]} + $s" | bc -l)
    cpu[$side]=$(echo "${cpu[$side]} + $c" | bc -l)
    printf 'round %d %-8s %4d jobs in %6.2f s = %6.1f jobs/s   CPU %.2f ms/job\n' \
      "$r" "$side" "$N" "$s" "$(echo "$N / $s" | bc -l)" "$c"
  done
  ratios+=("$(echo "${this[without]} / ${this[with]}" | bc -l)")
  printf 'round %d ratio with/without %.3f\n' "$r" "${ratios[-1]}"
done
with=$(echo "$N * $ROUNDS / ${wall[with]}" | bc -l)
without=$(echo "$N * $ROUNDS / ${wall[without]}" | bc -l)
ratio=$(echo "$with / $without" | bc -l)
median=$(printf '%s\n' "${ratios[@]}" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
printf 'CPU of slurmctld + munged: with %.2f ms/job, without %.2f ms/job\n' \
  "$(echo "${cpu[with]} / $ROUNDS" | bc -l)" "$(echo "${cpu[without]} / $ROUNDS" | bc -l)"
printf 'sbatch throughput: with job_submit/saker %.1f jobs/s, without %.1f jobs/s, ratio %.3f (median of rounds %.3f) [target >= 0.95: %s]\n' \
  "$with" "$without" "$ratio" "$median" "$(echo "$ratio >= 0.95" | bc -l | sed 's/1/MET/;s/0/MISSED/')"
