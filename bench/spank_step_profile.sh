#!/usr/bin/env bash
# spank_saker.so's own cost per node-step, outside Slurm (issue 30): bench/spank_step_harness
# plays slurmstepd for one step of a job that declares a restricted dataset with a grant
# (the residency check from the node record, the attestation signed, affinity planned),
# in a process of its own per step, as Slurm runs it. bench_step_launch.sh measures the
# whole launch on a real cluster, where the plugin is a small part of the CPU and other
# people's load moves the wall time; this measures the plugin alone: the CPU time of a
# step with it and of one without (`perf stat -r`, task-clock and page faults, sides
# taking turns), and where valgrind is installed the instructions each side runs (stable
# under load: what a change removes shows there first).
#
# Env: SAKER_BENCH_RUNS (steps per turn, default 200), SAKER_BENCH_ROUNDS (default 5),
# SAKER_BENCH_COMPARE=/path/to/other/spank_saker.so (a third side: a change's before/after).
# For where the time goes: `valgrind --tool=callgrind` or `strace -f -c` on the command the
# bench prints.
set -euo pipefail
SRC=${SAKER_SRCDIR:-%%SAKER_SRCDIR%%}
BUILD=${SAKER_BUILDDIR:-%%SAKER_BUILDDIR%%}
RUNS=${SAKER_BENCH_RUNS:-200}
ROUNDS=${SAKER_BENCH_ROUNDS:-5}
COMPARE=${SAKER_BENCH_COMPARE:-}
harness=$BUILD/bench/spank_step_harness
# Debian's slurmstepd links libhwloc (and with it libudev): the plugin finds it loaded there.
export HARNESS_PRELOAD=${HARNESS_PRELOAD-libhwloc.so.15}
so=$BUILD/plugins/spank/.libs/spank_saker.so
[[ $(id -u) == 0 ]] || { echo "spank_step_profile: needs root (the attestation key must be root's, as in slurmstepd); skipped"; exit 0; }
command -v perf >/dev/null || { echo "spank_step_profile: needs perf (linux-perf); skipped"; exit 0; }
[[ -x $harness && -f $so ]] || { echo "spank_step_profile: build first: make bench/spank_step_harness plugins/spank/spank_saker.la" >&2; exit 2; }
[[ -z $COMPARE || -f $COMPARE ]] || { echo "spank_step_profile: SAKER_BENCH_COMPARE=$COMPARE is not a file" >&2; exit 2; }
s=$(mktemp -d /tmp/saker-step-profile-XXXXXX)
trap 'rm -rf "$s"' EXIT
mkdir -p "$s/spool" "$s/etc"
cat >"$s/policy.yaml" <<'POLICY'
version: 1
unknown_datasets: deny
rules: {residency: enforce, access: enforce, gpu: enforce, locality: enforce}
classifications: [{name: restricted, requires_grant: true}]
zones: [{name: here, country: AE}]
partitions: [{name: all, zone: here, nodes: "saker[1-32]", default: true}]
datasets: [{name: records, classification: restricted, zones: [here]}]
grants: [{accounts: [bench], datasets: [records]}]
POLICY
openssl genpkey -algorithm ed25519 -out "$s/site.key" 2>/dev/null && chmod 0600 "$s/site.key"
echo "ProctrackType=proctrack/linuxproc" >"$s/etc/slurm.conf"
export SLURMD_NODENAME=saker1 HARNESS_SPOOL=$s/spool HARNESS_CONF=$s/etc/slurm.conf HARNESS_QUIET=1
export HARNESS_JOB_ID=1 HARNESS_DATASET=records HARNESS_JOB_SLURM_SPANK_SAKER_DATASETS=records
sides=(none "$so")
[[ -n $COMPARE ]] && sides+=("$COMPARE")
# args_of I: plugstack.conf's arguments for side I. Each side has a state directory of its
# own (the job prolog writes the node record into each): a plugin's note of the public key
# (STATE/NODE/attest-key.pub) is in its own version's format, and two builds sharing one
# would each derive the key again after every step of the other.
args_of() { args=(state-dir="$s/state.$1" policy="$s/policy.yaml" attest-key="$s/site.key" attest-dir="$s/attest"); }
for i in "${!sides[@]}"; do
  args_of "$i"
  [[ ${sides[$i]} == none ]] || SLURM_JOB_ID=1 SLURM_JOB_UID=0 SLURM_JOB_USER=root SLURM_JOB_ACCOUNT=bench \
    SPANK_SAKER_DATASETS=records SLURM_JOB_PARTITION=all SLURM_NODELIST='saker[1-32]' \
    "$harness" "${sides[$i]}" prolog "${args[@]}"
  # Each must run a step, or it measures a refusal (and the first notes the public key).
  "$harness" "${sides[$i]}" step "${args[@]}" || { echo "spank_step_profile: a step with ${sides[$i]} failed" >&2; exit 1; }
done
args_of N
echo "one node-step: $harness PLUGIN step ${args[*]} (N: the side's number; $RUNS steps per turn, $ROUNDS rounds)"
echo "before: $(uptime)"
for ((r = 1; r <= ROUNDS; r++)); do
  line="  round $r:"
  for i in "${!sides[@]}"; do
    args_of "$i"
    out=$(perf stat -x, -r "$RUNS" -e task-clock,page-faults "$harness" "${sides[$i]}" step "${args[@]}" 2>&1 >/dev/null)
    ms=$(awk -F, '/task-clock/ { print $1 }' <<<"$out") faults=$(awk -F, '/page-faults/ { print $1 }' <<<"$out")
    echo "$ms $faults" >>"$s/side.$i"
    line+=" $(basename "${sides[$i]}") ${ms} ms ${faults} faults;"
  done
  echo "$line"
done
echo "after: $(uptime)"
median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
base=$(cut -d' ' -f1 "$s/side.0" | median)
for i in "${!sides[@]}"; do
  ((i == 0)) && continue
  m=$(cut -d' ' -f1 "$s/side.$i" | median) f=$(cut -d' ' -f2 "$s/side.$i" | median) f0=$(cut -d' ' -f2 "$s/side.0" | median)
  awk -v m="$m" -v b="$base" -v f="$f" -v f0="$f0" -v n="${sides[$i]}" 'BEGIN {
    printf "%s: %.3f ms CPU per node-step (median of rounds), without a plugin %.3f: the plugin %.3f ms, %d page faults\n", n, m, b, m - b, f - f0 }'
done
if command -v valgrind >/dev/null; then
  # Two counts per side: the task (forked from the step: its count starts with the step's
  # up to the fork) ends first, then the step's process.
  for i in "${!sides[@]}"; do
    args_of "$i"
    n=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$harness" "${sides[$i]}" step "${args[@]}" 2>&1 |
      awk '/I *refs/ { gsub(",", "", $NF); print $NF }' | tr '\n' ' ')
    echo "instructions with $(basename "${sides[$i]}"): task $(cut -d' ' -f1 <<<"$n"), step $(cut -d' ' -f2 <<<"$n")"
  done
fi
