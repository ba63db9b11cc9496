#!/usr/bin/env bash
# What spank_saker.so's affinity adds to a real step launch: the wall time of
# `srun -N1 -n8 --gpus-per-task=1 true` on a local 1-node cluster (8 fake GPUs, the
# topology fixture topo-itest-2cpu-8gpu.xml whose PUs are this machine's CPUs 0-1),
# with the plugin vs without it, in the same run on the same cluster (target: <= 1.03x).
# A third side loads the plugin with gpu-affinity=none, which splits the cost into
# loading spank_saker.so (and its libraries) in srun and slurmstepd, and the affinity
# work itself (topology cache read, plan, binding in every task).
#
# srun and slurmstepd read plugstack.conf at every launch, so the sides differ only in
# that file: with the plugin (srun's local context and every task's plan and binding,
# the compact topology cache warm in slurmd's spool) or empty. Each round runs a turn of
# N sruns per side, in an order that rotates every round so no side always follows the
# same one; every round's ratios are printed, then their medians and spread. Before timing, the bench checks that the plugin really bound the tasks
# (--gpu-affinity=explain) and that the other side really ran without it.
#
# Env: SAKER_BENCH_SRUNS (sruns per turn, default 10), SAKER_BENCH_ROUNDS (default 10).
set -euo pipefail
SRC=${SAKER_SRCDIR:-%%SAKER_SRCDIR%%}
BUILD=${SAKER_BUILDDIR:-%%SAKER_BUILDDIR%%}
N=${SAKER_BENCH_SRUNS:-10}
ROUNDS=${SAKER_BENCH_ROUNDS:-10}
[[ $(id -u) == 0 ]] || { echo "bench_affinity_srun: needs root (real Slurm daemons); skipped"; exit 0; }
topo="$SRC/tests/data/topo-itest-2cpu-8gpu.xml"
scratch=$(mktemp -d /tmp/saker-bench-srun-XXXXXX)
chmod 755 "$scratch"
prefix="$scratch/cluster"
cleanup() {
  "$SRC/scripts/saker-cluster" down --prefix "$prefix" >/dev/null 2>&1 || true
  rm -rf "$scratch"
}
trap cleanup EXIT

for attempt in 1 2 3 4 5; do
  port=$((24000 + RANDOM % 5900))
  "$SRC/scripts/saker-cluster" up --prefix "$prefix" --port-base "$port" --build-dir "$BUILD" --nodes 1 \
    --gpus-per-node 8 --cpus-per-node 8 --no-job-submit --spank-args "topology=$topo" >"$scratch/up.log" 2>&1 &&
    rc=0 || rc=$?
  ((rc == 4)) || break  # 4: a port of the range was busy; try another
done
if ((rc != 0)); then
  cat "$scratch/up.log" >&2
  echo "bench_affinity_srun: the cluster did not come up (above)" >&2
  exit 1
fi
export SLURM_CONF="$prefix/etc/slurm.conf"
plugstack="$prefix/etc/plugstack.conf"
cp "$plugstack" "$scratch/plugstack.with"
grep -v spank_saker "$plugstack" >"$scratch/plugstack.without" || true
sed '/spank_saker/ s|$| gpu-affinity=none|' "$plugstack" >"$scratch/plugstack.none"
side() { cp "$scratch/plugstack.$1" "$plugstack"; }
step=(srun -N1 -n8 --gpus-per-task=1)

# The comparison means something only if the plugin works on one side and is absent on the other.
side with
out=$("${step[@]}" --gpu-affinity=explain true 2>&1)
grep -q "saker: rank 7 bound to CPUs 1, NUMA node 0, GPU 7" <<<"$out" ||
  { echo "bench_affinity_srun: with the plugin, the tasks were not bound as planned:" >&2; echo "$out" >&2; exit 1; }
side without
if "${step[@]}" --gpu-affinity=explain true >/dev/null 2>&1; then
  echo "bench_affinity_srun: --gpu-affinity was accepted without the plugin" >&2
  exit 1
fi

# turn SIDE: N sruns; sets t (seconds).
turn() {
  local i start
  side "$1"
  start=$EPOCHREALTIME
  for ((i = 0; i < N; i++)); do "${step[@]}" true 2>/dev/null; done
  t=$(echo "$EPOCHREALTIME - $start" | bc -l)
}
median_of() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
spread_of() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "min %.3f, max %.3f", lo, hi }'; }

turn without; turn none; turn with  # warm-up, untimed (and the topology cache written)
# Other users of this machine's cores swamp a difference of a few ms: show the load.
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
printf 'srun -N1 -n8 --gpus-per-task=1 true: %d rounds of %d sruns per side; sides: without the plugin,
' "$ROUNDS" "$N"
printf 'plugin loaded with gpu-affinity=none, plugin with affinity (the order rotates every round)
'
total=() affinity=()
order=(without none with)
for ((r = 1; r <= ROUNDS; r++)); do
  declare -A ms=()
  for ((i = 0; i < 3; i++)); do
    s=${order[(i + r) % 3]}
    turn "$s"
    ms[$s]=$(echo "$t * 1000 / $N" | bc -l)
  done
  total+=("$(echo "${ms[with]} / ${ms[without]}" | bc -l)")
  affinity+=("$(echo "${ms[with]} / ${ms[none]}" | bc -l)")
  printf 'round %2d: without %6.1f ms/srun, none %6.1f, with %6.1f: with/without %.3f, with/none %.3f\n' "$r" \
    "${ms[without]}" "${ms[none]}" "${ms[with]}" "${total[-1]}" "${affinity[-1]}"
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs (ratios are noise when it exceeds the CPUs)"
m_total=$(printf '%s\n' "${total[@]}" | median_of)
m_aff=$(printf '%s\n' "${affinity[@]}" | median_of)
printf 'affinity (plugin with affinity / plugin loaded with gpu-affinity=none): median %.3f (%s)\n' \
  "$m_aff" "$(printf '%s\n' "${affinity[@]}" | spread_of)"
printf 'whole plugin (with / without spank_saker.so): median %.3f (%s) [target <= 1.03: %s]\n' \
  "$m_total" "$(printf '%s\n' "${total[@]}" | spread_of)" "$(echo "$m_total <= 1.03" | bc -l | sed 's/1/MET/;s/0/MISSED/')"
