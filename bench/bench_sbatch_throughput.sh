#!/usr/bin/env bash
# sbatch throughput through a real slurmctld with job_submit/saker vs without it, in the
# same run (target: >= 0.95x). Two fresh 3-node clusters of the same shape run side by
# side, one with the plugin and one without; both get the same held jobs that declare a
# dataset (with the plugin, each one is evaluated, routed to gpu-ae + feature lustre-ae,
# audited and indexed). The sides take turns of N jobs, strictly alternating (without,
# with, without, ..., without), so that the machine's changing load (other users of its
# cores) hits both alike and each turn follows one of the other side; the cluster not
# being measured sits idle. Each round compares a turn with the plugin with the two turns
# without it around it.
#
# After each side's turn the bench rests 1 s, untimed, so that the plugin's deferred work
# (the audit log's last group commit, the last index sweep) is done before the other
# side's turn and cannot slow it. That leaves at most one audit write + fdatasync and one
# index sweep per turn out of the wall time (a few ms against a turn of about a second),
# so the CPU time slurmctld and munged spent per job is printed too, measured from a
# turn's first sbatch to the end of its rest: it counts everything the plugin costs the
# controller, and it is far less noisy than wall time on a shared machine.
#
# slurmctld's state directory (a few files per job) is on tmpfs for both sides: on this
# shared ext4 disk, creating them took most of slurmctld's CPU, and how much depended on
# where the directory landed, noise the comparison does not need. The audit log stays on
# disk (PREFIX/etc), fdatasync included, so the plugin's I/O is fully counted.
#
# Env: SAKER_BENCH_JOBS (jobs per turn, default 100), SAKER_BENCH_ROUNDS (turns with the
# plugin, default 10; one more turn without it).
set -euo pipefail
SRC=${SAKER_SRCDIR:-%%SAKER_SRCDIR%%}
BUILD=${SAKER_BUILDDIR:-%%SAKER_BUILDDIR%%}
N=${SAKER_BENCH_JOBS:-100}
ROUNDS=${SAKER_BENCH_ROUNDS:-10}
[[ $(id -u) == 0 ]] || { echo "bench_sbatch_throughput: needs root (real Slurm daemons); skipped"; exit 0; }
policy="$SRC/tests/data/policy/two_zones.yaml"
parts="gpu-ae=saker[1-2];cpu-ae=saker[1-2];gpu-eu=saker3"
ticks=$(getconf CLK_TCK)
scratch=$(mktemp -d /tmp/saker-bench-XXXXXX)
chmod 755 "$scratch"  # munged wants every directory above its socket searchable
declare -A prefix=() statedir=()
cleanup() {
  local side
  for side in "${!prefix[@]}"; do
    "$SRC/scripts/saker-cluster" down --prefix "${prefix[$side]}" >/dev/null 2>&1 || true
  done
  for side in "${!statedir[@]}"; do rm -rf "${statedir[$side]}"; done
  rm -rf "$scratch"
}
trap cleanup EXIT

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }  # utime + stime, all threads

# cluster_up with|without: a fresh cluster in ${prefix[SIDE]}. Ports below the ephemeral range
# (32768) and below the integration tests' (30000 up): no outgoing connection takes them.
cluster_up() {
  local side=$1 extra=() port rc attempt
  [[ $side == without ]] && extra=(--no-job-submit)
  prefix[$side]=$(mktemp -d "$scratch/$side-XXXXXX")
  statedir[$side]=$(mktemp -d /dev/shm/saker-bench-state-XXXXXX)
  for attempt in 1 2 3 4 5; do
    port=$((24000 + RANDOM % 5900))
    "$SRC/scripts/saker-cluster" up --prefix "${prefix[$side]}" --port-base "$port" --build-dir "$BUILD" --nodes 3 \
      --policy "$policy" --partitions "$parts" --slurm-conf-extra "StateSaveLocation=${statedir[$side]}" \
      "${extra[@]}" >"$scratch/up.log" 2>&1 && rc=0 || rc=$?
    ((rc == 4)) || break  # 4: a port of the range was busy; try another
  done
  if ((rc != 0)); then
    cat "$scratch/up.log" >&2
    echo "bench_sbatch_throughput: the cluster did not come up (above)" >&2
    exit 1
  fi
  SLURM_CONF=${prefix[$side]}/etc/slurm.conf \
    scontrol update NodeName='saker[1-2]' AvailableFeatures=lustre-ae ActiveFeatures=lustre-ae
}

# The plugin must have done its work on every job, or the comparison means nothing.
check_side() {
  local side=$1 total=$2 said routed audited
  export SLURM_CONF=${prefix[$side]}/etc/slurm.conf
  said=$(grep -c "saker: partition set to gpu-ae" "$scratch/$side.err" || true)
  routed=$(squeue -h -t PD -o '%P %f' | grep -c '^gpu-ae lustre-ae$' || true)
  if [[ $side == with ]]; then
    audited=$(grep -c '"event":"submit"' "${prefix[$side]}/etc/saker-audit.log" || true)
    if ((said != total || routed != total || audited != total)); then
      echo "bench_sbatch_throughput: with job_submit/saker, $said of $total sbatch said 'partition set'," \
        "$routed jobs were routed, $audited were audited; expected $total each" >&2
      exit 1
    fi
  elif ((said != 0)); then
    echo "bench_sbatch_throughput: job_submit/saker answered on the side without it" >&2
    exit 1
  fi
}

# run_turn with|without: N submissions; sets turn_wall (s) and turn_cpu (ticks).
run_turn() {
  local side=$1 jobs=$2 ctld munged c0 m0 start end i
  export SLURM_CONF=${prefix[$side]}/etc/slurm.conf
  ctld=$(cat "${prefix[$side]}/run/slurmctld.pid")
  munged=$(cat "${prefix[$side]}/munge/munged.pid")
  c0=$(cpu_ticks "$ctld")
  m0=$(cpu_ticks "$munged")
  start=$EPOCHREALTIME
  for ((i = 0; i < jobs; i++)); do
    sbatch --hold -A medical --dataset=patients@v3 -o /dev/null --wrap true >/dev/null 2>>"$scratch/$side.err"
  done
  end=$EPOCHREALTIME
  sleep 1
  turn_wall=$(echo "$end - $start" | bc -l)
  turn_cpu=$(($(cpu_ticks "$ctld") - c0 + $(cpu_ticks "$munged") - m0))
  submitted[$side]=$((submitted[$side] + jobs))
}

# timed_turn SIDE: a turn of N jobs, added to the side's totals; sets this (s) and this_cpu (ms/job).
timed_turn() {
  run_turn "$1" "$N"
  this=$turn_wall
  this_cpu=$(echo "$turn_cpu * 1000 / $ticks / $N" | bc -l)
  wall[$1]=$(echo "${wall[$1]} + $turn_wall" | bc -l)
  cpu[$1]=$((cpu[$1] + turn_cpu))
  turns[$1]=$((turns[$1] + 1))
}

declare -A wall=([with]=0 [without]=0) cpu=([with]=0 [without]=0) turns=([with]=0 [without]=0)
declare -A submitted=([with]=0 [without]=0)
cluster_up without
cluster_up with
# Warm-up, untimed: past each slurmctld's start (node registrations, first state saves)
# and the first, slower file creations in its fresh state directory.
run_turn without 100
run_turn with 100
printf 'sbatch throughput: %d held jobs per turn, %d turns with job_submit/saker between %d without;\n' \
  "$N" "$ROUNDS" $((ROUNDS + 1))
printf 'CPU = slurmctld + munged per job, from a turn'"'"'s first sbatch to the end of its rest\n'
ratios=()
timed_turn without
before=$this before_cpu=$this_cpu
for ((r = 1; r <= ROUNDS; r++)); do
  timed_turn with
  with_s=$this with_cpu=$this_cpu
  timed_turn without
  # Each turn with the plugin is compared with the turns without it on both sides: the
  # sides strictly alternate, so each follows the other's turn (a turn's leftovers, such
  # as slurmctld saving its state, land on the other side alike), and a steady drift of
  # the machine's load cancels out.
  without_s=$(echo "($before + $this) / 2" | bc -l)
  ratios+=("$(echo "$without_s / $with_s" | bc -l)")
  printf 'round %2d: without %6.1f jobs/s %5.2f ms CPU/job, with %6.1f jobs/s %5.2f ms CPU/job: ratio %.3f\n' "$r" \
    "$(echo "$N / $without_s" | bc -l)" "$(echo "($before_cpu + $this_cpu) / 2" | bc -l)" \
    "$(echo "$N / $with_s" | bc -l)" "$with_cpu" "${ratios[-1]}"
  before=$this before_cpu=$this_cpu
done
check_side with "${submitted[with]}"
check_side without "${submitted[without]}"
with=$(echo "$N * ${turns[with]} / ${wall[with]}" | bc -l)
without=$(echo "$N * ${turns[without]} / ${wall[without]}" | bc -l)
ratio=$(echo "$with / $without" | bc -l)
median=$(printf '%s\n' "${ratios[@]}" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
printf 'CPU of slurmctld + munged: with %.2f ms/job, without %.2f ms/job\n' \
  "$(echo "${cpu[with]} * 1000 / $ticks / ($N * ${turns[with]})" | bc -l)" \
  "$(echo "${cpu[without]} * 1000 / $ticks / ($N * ${turns[without]})" | bc -l)"
printf 'sbatch throughput: with job_submit/saker %.1f jobs/s, without %.1f jobs/s, ratio %.3f (median of rounds %.3f) [target >= 0.95: %s]\n' \
  "$with" "$without" "$ratio" "$median" "$(echo "$ratio >= 0.95" | bc -l | sed 's/1/MET/;s/0/MISSED/')"
