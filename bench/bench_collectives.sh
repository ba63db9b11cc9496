#!/usr/bin/env bash
# bench_collectives.sh: reduce-scatter, alltoall and allgather busbw (GB/s; nccl-tests'
# definition: whole buffer x (n-1)/n / time), 2 ranks on this machine, each run ROUNDS
# times, interleaved, niced:
#   - saker C++ (bench_collectives under saker-run --local) against OpenMPI's
#     MPI_Reduce_scatter_block / MPI_Alltoall / MPI_Allgather (bench_collectives_mpi under
#     mpirun), the same sizes, the same timing (bench/collectives_common.hpp);
#   - from Python: the saker backend against torch's gloo backend in the same processes,
#     and saker.torch's hvd.reducescatter / alltoall / allgather (bench_torch.py collectives).
#     torch 1.13's gloo has no reduce_scatter: its column is what gloo users do instead
#     (an allreduce, then their slice).
# The table shows each figure's median over the rounds and its min-max, and the ratios the
# issue sets (saker >= gloo and >= OpenMPI; allgather >= 1.5x gloo at 4 MiB).
# Usage: bench/bench_collectives.sh [ROUNDS]   (in the build tree, or set SAKER_BUILDDIR;
# BENCH_SIZES=1048576,4194304 picks sizes; default 3 rounds; BENCH_BASELINE=BUILDDIR adds
# that build's bench_collectives as column saker-base, in the same rounds, and cxx/base;
# BENCH_PIN=1 pins rank r to CPU r (taskset; OpenMPI --bind-to core): unpinned on a loaded
# machine the scheduler may keep both ranks on one CPU, and Saker's barrier, which yields to
# a peer seen on its own CPU, then hands the CPU over at every call while OpenMPI busy-polls;
# BENCH_BUSY=1 runs a busy loop at normal priority on every CPU for the whole run, the
# machine another user's CPU-bound job makes: with BENCH_PIN=1 each rank shares its CPU)
set -euo pipefail
if [[ ${1:-} == -h || ${1:-} == --help ]]; then sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0; fi
[[ ${1:-3} =~ ^[1-9][0-9]*$ ]] || { echo "bench_collectives: ROUNDS must be a positive number, not '$1'" >&2; exit 2; }
rounds=${1:-3}
build=${SAKER_BUILDDIR:-$PWD}
src=${SAKER_SRCDIR:-$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)}
sizes=${BENCH_SIZES:-1048576,4194304,16777216,67108864}
export BENCH_SIZES=$sizes PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1
run="$build/launcher/saker-run/saker-run"
py=${SAKER_PYTHON:-/usr/bin/python3}
for p in "$run" "$build/bench/bench_collectives" "$build/bench/bench_collectives_mpi"; do
  [[ -x $p ]] || { echo "bench_collectives: no $p; run 'make bench/bench_collectives bench/bench_collectives_mpi' in the build tree" >&2; exit 1; }
done
out=$(mktemp)
busy=()
trap 'rm -f "$out"; [[ ${#busy[@]} == 0 ]] || kill "${busy[@]}" 2>/dev/null' EXIT
if [[ ${BENCH_BUSY:-0} == 1 ]]; then
  for ((c = 0; c < $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc); c++)); do
    taskset -c "$c" bash -c 'while :; do :; done' &
    busy+=($!)
  done
fi
# cxx LABEL CMD...: "OP BYTES median min max busbw" lines become "result OP.BYTES.LABEL busbw".
cxx() {
  local label=$1
  shift
  nice "$@" 2>/dev/null | awk -v l="$label" 'NF == 6 {print "result " $1 "." $2 "." l " " $6} $3 == "wrong" {print "bench_collectives: " l " " $1 " " $2 " gave a wrong result" > "/dev/stderr"}' >> "$out" || true
}
base=${BENCH_BASELINE:-}
pin=() bind=none
if [[ ${BENCH_PIN:-0} == 1 ]]; then
  # nproc without OMP_NUM_THREADS, which it honours: exported as 1 above, it pinned every rank to CPU 0
  cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
  pin=(bash -c "exec taskset -c \$((SAKER_RANK % $cpus)) \"\$@\"" pin) bind=core
fi
[[ -z $base || -x $base/bench/bench_collectives ]] || { echo "bench_collectives: no $base/bench/bench_collectives (BENCH_BASELINE)" >&2; exit 1; }
for ((i = 1; i <= rounds; i++)); do
  echo "round $i/$rounds, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  cxx saker-cxx "$run" --local -n 2 --max-restarts 0 -- "${pin[@]}" "$build/bench/bench_collectives"
  [[ -z $base ]] || cxx saker-base "$run" --local -n 2 --max-restarts 0 -- "${pin[@]}" "$base/bench/bench_collectives"
  # OpenMPI as bench_allreduce runs it: its default one-node path (shared memory, busy
  # polling), and its TCP path over loopback (the one between nodes). Saker's alltoall,
  # allgather and reduce-scatter take shared memory on one node. OpenMPI's busy
  # polling suffers most on a loaded machine: compare its min-max spread with `uptime`.
  cxx openmpi mpirun --allow-run-as-root --bind-to $bind -x BENCH_SIZES -np 2 "$build/bench/bench_collectives_mpi"
  cxx openmpi-tcp mpirun --allow-run-as-root --bind-to $bind -x BENCH_SIZES -np 2 --mca pml ob1 --mca btl tcp,self \
    --mca btl_tcp_if_include lo "$build/bench/bench_collectives_mpi"
  nice "$run" --local -n 2 --max-restarts 0 -- "${pin[@]}" $py "$src/bench/bench_torch.py" collectives "$sizes" 2>/dev/null |
    grep '^result' >> "$out" || echo "bench_collectives: the Python run failed; kept what it printed" >&2
done
$py - "$out" "$sizes" "${BENCH_PIN:-0}" "${BENCH_BUSY:-0}" <<'PY'
import statistics, sys
v = {}
for line in open(sys.argv[1]):
    _, k, x = line.split()
    v.setdefault(k, []).append(float(x))
sizes = [int(s) for s in sys.argv[2].split(",")]
ways = ["saker-cxx", "openmpi", "openmpi-tcp", "saker", "gloo", "hvd"]
based = any(k.endswith(".saker-base") for k in v)
if based:
    ways.insert(1, "saker-base")
print("busbw GB/s, median (min-max) over rounds; 2 ranks, one node, CPU, shared machine (niced)"
      + ("; rank r pinned to CPU r" if sys.argv[3] == "1" else "")
      + ("; a busy loop on every CPU" if sys.argv[4] == "1" else ""))
print(f"{'op':15s}{'bytes':>10s}" + "".join(f"{w:>22s}" for w in ways) + f"{'cxx/mpi':>9s}{'cxx/mpitcp':>11s}{'saker/gloo':>11s}"
      + (f"{'cxx/base':>9s}" if based else ""))
def fig(k):
    xs = v.get(k)
    return (statistics.median(xs), min(xs), max(xs)) if xs else None
for op in ("reduce_scatter", "alltoall", "allgather"):
    for b in sizes:
        cells, f = "", {}
        for w in ways:
            f[w] = fig(f"{op}.{b}.{w}")
            cells += f"{'-':>22s}" if not f[w] else f"{f[w][0]:9.2f} ({f[w][1]:.2f}-{f[w][2]:.2f})".rjust(22)
        r1 = f"{f['saker-cxx'][0] / f['openmpi'][0]:9.2f}" if f["saker-cxx"] and f["openmpi"] and f["openmpi"][0] > 0 else f"{'-':>9s}"
        r2 = f"{f['saker-cxx'][0] / f['openmpi-tcp'][0]:11.2f}" if f["saker-cxx"] and f["openmpi-tcp"] and f["openmpi-tcp"][0] > 0 else f"{'-':>11s}"
        r3 = f"{f['saker'][0] / f['gloo'][0]:11.2f}" if f["saker"] and f["gloo"] and f["gloo"][0] > 0 else f"{'-':>11s}"
        r4 = ""
        if based:
            r4 = f"{f['saker-cxx'][0] / f['saker-base'][0]:9.2f}" if f["saker-cxx"] and f["saker-base"] and f["saker-base"][0] > 0 else f"{'-':>9s}"
        print(f"{op:15s}{b:10d}{cells}{r1}{r2}{r3}{r4}")
print("targets: reduce_scatter and alltoall saker >= gloo and >= OpenMPI; allgather saker >= 1.5x gloo at 4 MiB")
PY
