#!/usr/bin/env bash
# bench_torch.sh: saker.torch against its peers, measured side by side in this run (2 ranks,
# saker-run --local, CPU): DDP step time and allreduce time per step of a ~25M-parameter
# model over the saker backend vs Gloo, two floors (the same step with DDP's communication
# off, and with a backend that costs nothing: no backend's step is shorter), and a 64 MiB
# allreduce from Python vs the C++ benchmark (bench_allreduce, same size, same machine).
# Saker also runs forced onto its TCP ring (SAKER_COMM_TRANSPORT=ring), the transport it
# uses between nodes. The machine is shared: runs are niced, interleaved for ROUNDS rounds,
# and the table shows median and min-max of the rounds. With --cluster (root), the DDP pair
# also runs across 2 nodes of a private local Slurm cluster (one rank per node, saker-run
# inside sbatch: Saker's automatic transport is then its TCP ring, Gloo's is TCP, both over
# the nodes' addresses).
# With --baseline DIR (the build tree of an older commit, e.g. of 189ae67^ in a git
# worktree: `make python/saker/_comm.la` is enough), each round also runs that
# build's saker DDP and fused runs, each beside this build's in turn (AB BA AB ...: a load
# that drifts linearly adds as much to each side) and prints this/baseline per round (median
# and min-max over the rounds), the same figures for baseline against baseline (round i+1
# over round i: the noise floor, which says whether a 2% difference can be told apart here),
# and each run's load average at its start and end; the TCP ring runs are left out.
# With --ddp, each round runs only the saker and gloo DDP runs (in turns: saker first in odd
# rounds), and the table adds, per round, saker's step over the free backend's (paired rep by
# rep in the same processes), saker's step over gloo's of the same round, and each one's
# CPU time per step (load hardly moves it: step CPU - free CPU is what the backend burns).
# Usage: bench/bench_torch.sh [--cluster] [--baseline DIR] [--ddp] [ROUNDS]   (run in the build
# tree, or set SAKER_BUILDDIR; default 3 rounds; SAKER_PYTHON names another python3 with torch)
set -euo pipefail
cluster=0 baseline= ddp_only=0
while [[ ${1:-} == -* ]]; do
  case $1 in
    --cluster) cluster=1; shift ;;
    --baseline) baseline=$(readlink -f "${2:-}"); shift 2 ;;
    --ddp) ddp_only=1; shift ;;
    -h | --help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_torch: unknown option '$1' (usage: bench_torch.sh [--cluster] [--baseline DIR] [--ddp] [ROUNDS])" >&2; exit 2 ;;
  esac
done
[[ ${1:-3} =~ ^[1-9][0-9]*$ ]] || { echo "bench_torch: ROUNDS must be a positive number, not '$1' (usage: bench_torch.sh [--cluster] [--baseline DIR] [--ddp] [ROUNDS])" >&2; exit 2; }
[[ $ddp_only == 0 || ($cluster == 0 && -z $baseline) ]] || { echo "bench_torch: --ddp runs alone, without --cluster or --baseline" >&2; exit 2; }
rounds=${1:-3}
build=${SAKER_BUILDDIR:-$PWD}
src=${SAKER_SRCDIR:-$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)}
[[ -x $build/launcher/saker-run/saker-run ]] || { echo "bench_torch: no saker-run under $build; run it in the build tree" >&2; exit 1; }
# Each build needs its Python extension (what is measured: libsaker_comm is linked into
# it); where python-stage has not run (it also builds saker._ckpt, which no run here
# imports), its sources are linked beside the extension as python-stage does. The
# baseline's own saker-run starts its ranks where it has one, else this build's (the
# launcher only starts them).
for b in "$build" ${baseline:+"$baseline"}; do
  [[ -e $b/python/saker/.libs/_comm.so ]] ||
    { echo "bench_torch: no python/saker/.libs/_comm.so under '$b'; run 'make python/saker/_comm.la' in that build tree" >&2; exit 1; }
  bsrc=$(sed -n 's/^abs_top_srcdir = //p' "$b/Makefile")
  for f in $(cd "$bsrc" && find python/saker -name '*.py'); do
    mkdir -p "$b/$(dirname "$f")"
    [[ -e $b/$f ]] || ln -s "$bsrc/$f" "$b/$f"
  done
  [[ -e $b/python/saker/_comm.so ]] || ln -s .libs/_comm.so "$b/python/saker/_comm.so"
done
pythonpath=${PYTHONPATH:-}
export PYTHONPATH="$build/python${pythonpath:+:$pythonpath}" OMP_NUM_THREADS=1
run="$build/launcher/saker-run/saker-run"
py=${SAKER_PYTHON:-/usr/bin/python3}  # a python3 with torch (Debian's by default)
out=$(mktemp) pairs=$(mktemp) loads=$(mktemp) byround=$(mktemp)
if ((cluster)); then
  (($(id -u) == 0)) || { echo "bench_torch: --cluster starts a private Slurm cluster and needs root" >&2; exit 1; }
  # The integration tests' cluster helpers: free ports, a private prefix, torn down at exit.
  SAKER_SRCDIR=$src SAKER_BUILDDIR=$build IT_NAME=bench_torch source "$src/tests/integration/lib.sh"
  it_at_exit rm -f "$out" "$pairs" "$loads" "$byround"
  echo "bench_torch: starting a 2-node local cluster" >&2
  it_cluster_up --nodes 2 --gpus-per-node 0 --cpus-per-node 2 --no-job-submit >&2
else
  trap 'rm -f "$out" "$pairs" "$loads" "$byround"' EXIT
fi
# One local run of 2 ranks; its results, once. --max-restarts 0: a rank that aborts at exit
# after the results are out (Gloo's threads do without destroy_process_group, which hangs
# there instead: 'terminate called without an active exception', 1 in 6 runs here) must not
# make saker-run run the measurement again and count it twice.
# local_run_in BUILD TAG CMD...: the same with BUILD's saker-run and Python package; TAG
# names the run in the load table (round, tag, 1-minute load average at start and end) and,
# with --baseline, its results go to the per-round pairs too.
local_run_in() {
  local b=$1 tag=$2 log l0 l1 _
  shift 2
  log=$(mktemp)
  read -r l0 _ </proc/loadavg
  local launcher=$b/launcher/saker-run/saker-run
  [[ -x $launcher ]] || launcher=$run
  if ! PYTHONPATH="$b/python${pythonpath:+:$pythonpath}" nice "$launcher" --local -n 2 \
    --max-restarts 0 -- "$@" >"$log" 2>&1; then
    echo "bench_torch: warning: '$*' failed; kept the results it printed: $(grep -m1 -E 'terminate|killed|rror' "$log")" >&2
  fi
  read -r l1 _ </proc/loadavg
  echo "$i $tag $l0 $l1" >> "$loads"
  grep '^result' "$log" >> "$out" || true
  grep '^result' "$log" | sed "s/^result/$i/" >> "$byround" || true
  [[ -z $baseline ]] || grep '^result' "$log" | sed "s/^result/$i/" >> "$pairs" || true
  rm -f "$log"
}
local_run() { local_run_in "$build" "$1" "${@:2}"; }
# One side of a --baseline pair: this build's ("head") or the baseline's ("base") saker run.
# Keys: saker.* and python.* for this build, base.saker.* and base.python.* for the baseline.
side_run() {
  local side=$1 mode=$2 b=$build prefix= args
  if [[ $side == base ]]; then b=$baseline prefix=base.; fi
  if [[ $mode == ddp ]]; then args=(ddp saker "${prefix}saker"); else args=(fused "${prefix}python"); fi
  local_run_in "$b" "$side.$mode" $py "$src/bench/bench_torch.py" "${args[@]}"
}
for ((i = 1; i <= rounds; i++)); do
  echo "round $i/$rounds" >&2
  if ((ddp_only)); then
    if ((i % 2)); then order="saker gloo"; else order="gloo saker"; fi
    for b in $order; do
      local_run $b.ddp $py "$src/bench/bench_torch.py" ddp $b
    done
    continue
  elif [[ -n $baseline ]]; then
    # This build and the baseline side by side, the order turned each round (AB BA AB ...).
    if ((i % 2)); then first=head second=base; else first=base second=head; fi
    side_run $first ddp; side_run $second ddp
    side_run $second fused; side_run $first fused
    local_run gloo.ddp $py "$src/bench/bench_torch.py" ddp gloo
  else
    for b in saker gloo; do
      local_run $b.ddp $py "$src/bench/bench_torch.py" ddp $b
    done
    # Saker's TCP ring, as between nodes (Gloo always uses TCP on 127.0.0.1).
    local_run tcp.ddp env SAKER_COMM_TRANSPORT=ring $py "$src/bench/bench_torch.py" ddp saker saker-tcp
    local_run fused $py "$src/bench/bench_torch.py" fused
  fi
  # The C++ benchmark's 64 MiB allreduce (Saker, one node, np 2): its busbw equals algbw
  # at np=2, so the time is bytes / busbw.
  read -r l0 _ </proc/loadavg
  nice "$build/bench/bench_allreduce" --quick --rounds 1 --sizes 67108864 --modes one-node 2>/dev/null |
    awk '$1 == 67108864 {printf "result cxx.raw64 %.6f\n", 67108864 / ($2 * 1e9); exit}' >> "$out" || true
  read -r l1 _ </proc/loadavg
  echo "$i cxx $l0 $l1" >> "$loads"
  if ((cluster)); then
    for b in saker gloo; do
      echo "round $i/$rounds: $b across 2 nodes" >&2
      # Under the plugin's default plan (no --omp-bind), nothing pins a rank's threads: these
      # two "nodes" share this machine's cores, and with --omp-bind=close libgomp would bind
      # both ranks' initial threads to CPU 0 (the step took 0.96 s against 0.54 s).
      sbatch -W -p all -N2 --ntasks-per-node=1 -o "$IT_PREFIX/bench-$b.out" --wrap \
        "exec nice $run --max-restarts 0 -- $py $src/bench/bench_torch.py ddp $b $b-2node" >/dev/null ||
        echo "bench_torch: warning: the 2-node $b run failed; kept the results it printed" >&2
      grep '^result' "$IT_PREFIX/bench-$b.out" >> "$out" ||
        { echo "bench_torch: the 2-node $b run printed no results:" >&2; tail -20 "$IT_PREFIX/bench-$b.out" >&2; exit 1; }
    done
  fi
done
$py - "$out" "$pairs" "$loads" "$byround" <<'PY'
import statistics, sys
v = {}
for line in open(sys.argv[1]):
    _, k, x = line.split()
    v.setdefault(k, []).append(float(x))
def show(k, label):
    if k not in v: print(f"{label:44s} (not measured)"); return None
    xs = v[k]; m = statistics.median(xs)
    print(f"{label:44s} {m*1e3:9.1f} ms   (min {min(xs)*1e3:.1f}, max {max(xs)*1e3:.1f}, {len(xs)} runs)")
    return m
print(f"model parameters: {int(v['params'][0]):,}; 2 ranks, one node, CPU, shared machine (niced)")
s, g = show("saker.step", "DDP step, saker backend"), show("gloo.step", "DDP step, gloo backend")
if s and g: print(f"{'  ratio saker/gloo (target <= 0.85)':44s} {s/g:9.2f}")
# Two floors, timed in every run. With DDP's communication switched off (no_sync) DDP also
# skips its own bucket copies; with a backend that costs nothing (a comm hook that returns
# each bucket at once) it does all its own work. No backend's step can be shorter than the
# second: free/gloo is the best ratio any backend can reach on this machine.
v["nosync.step"] = v.get("saker.nosync", []) + v.get("gloo.nosync", [])  # one node, both runs
v["free.step"] = v.get("saker.free", []) + v.get("gloo.free", [])
show("nosync.step", "DDP step without communication (no_sync)")
n = show("free.step", "DDP step, a backend that costs nothing")
if n and g: print(f"{'  best reachable ratio: free backend/gloo':44s} {n/g:9.2f}")
# The target line takes each run's own step/free (paired rep by rep in the same processes):
# the medians of separate runs above put the load's drift between them.
if "saker.step_over_free" in v:
    xs = v["saker.step_over_free"]
    print(f"{'  ratio saker/free backend (target <= 1.03)':44s} {statistics.median(xs):9.3f}   (paired per run; min {min(xs):.3f}, max {max(xs):.3f}, {len(xs)} runs)")
elif n and "saker.step" in v: print(f"{'  ratio saker/free backend (target <= 1.03)':44s} {statistics.median(v['saker.step'])/n:9.2f}")
for b in ("saker", "gloo"):
    if f"{b}.step_cpu" in v and f"{b}.free_cpu" in v:
        extra = [(s - f) * 1e3 for s, f in zip(v[f"{b}.step_cpu"], v[f"{b}.free_cpu"])]
        print(f"{'  CPU per step beyond the free backend, ' + b:44s} {statistics.median(extra):9.1f} ms   (min {min(extra):.1f}, max {max(extra):.1f}; all threads)")
s, g = show("saker.allreduce", "allreduce per step, saker backend"), show("gloo.allreduce", "allreduce per step, gloo backend")
if s and g: print(f"{'  ratio saker/gloo (target <= 0.5)':44s} {s/g:9.2f}")
t, ts = show("saker-tcp.allreduce", "allreduce per step, saker, TCP ring"), show("saker-tcp.step", "DDP step, saker, TCP ring")
if t and g: print(f"{'  ratio saker TCP ring/gloo (target <= 0.8)':44s} {t/g:9.2f}")
s2, g2 = show("saker-2node.allreduce", "allreduce per step, saker, 2 nodes"), show("gloo-2node.allreduce", "allreduce per step, gloo, 2 nodes")
if s2 and g2: print(f"{'  ratio across 2 nodes saker/gloo (target <= 0.8)':44s} {s2/g2:9.2f}")
s2, g2 = show("saker-2node.step", "DDP step, saker, 2 nodes"), show("gloo-2node.step", "DDP step, gloo, 2 nodes")
if s2 and g2: print(f"{'  ratio across 2 nodes saker/gloo':44s} {s2/g2:9.2f}")
f, r, c = (show("python.fused64", "64 MiB allreduce, Python, fusion buffer"), show("python.raw64", "64 MiB allreduce, Python, one call"),
           show("cxx.raw64", "64 MiB allreduce, C++ bench_allreduce"))
if f and c: print(f"{'  ratio Python fused / C++ (target <= 1.10)':44s} {f/c:9.2f}")
if r and c: print(f"{'  ratio Python one call / C++':44s} {r/c:9.2f}")
# --baseline: this build over the baseline, round by round, beside baseline over baseline.
rounds = {}
for line in open(sys.argv[2]):
    i, k, x = line.split()
    rounds.setdefault(int(i), {})[k] = float(x)
def spread(xs):
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else xs * 3
    return f"median {statistics.median(xs):.3f} (quartiles {q[0]:.3f}-{q[2]:.3f}, min {min(xs):.3f}, max {max(xs):.3f}, {len(xs)})"
if rounds:
    print("\nthis build / baseline, per round (pairs in turns: AB BA ...), and the noise floor")
    for k, label in (("saker.step", "DDP step"), ("saker.allreduce", "allreduce per step"),
                     ("python.fused64", "64 MiB fused (hvd.allreduce_)"), ("python.raw64", "64 MiB one call")):
        ab = [d[k] / d["base." + k] for d in rounds.values() if k in d and "base." + k in d]
        bb = [rounds[j + 1]["base." + k] / rounds[j]["base." + k] for j in rounds
              if j + 1 in rounds and "base." + k in rounds[j] and "base." + k in rounds[j + 1]]
        if ab: print(f"  {label:30s} this/baseline     {spread(ab)}")
        if bb: print(f"  {label:30s} baseline/baseline {spread(bb)}")
    print("per round: DDP step and fused 64 MiB (ms), this build / baseline")
    for i, d in sorted(rounds.items()):
        f = lambda k: f"{d[k]*1e3:7.1f}" if k in d else "    n/a"
        print(f"  round {i} ({'this build' if i % 2 else 'baseline'} first): step {f('saker.step')} / {f('base.saker.step')}, "
              f"fused {f('python.fused64')} / {f('base.python.fused64')}")
# Per round: saker's step over the free backend's (rep by rep, same processes), over gloo's
# step of the same round, and CPU per step (mean of the ranks' medians, all threads).
per = {}
for line in open(sys.argv[4]):
    i, k, x = line.split()
    per.setdefault(int(i), {})[k] = float(x)
if any("saker.step_over_free" in d for d in per.values()):
    print("\nper round: saker step/free (paired), saker step/gloo step; CPU ms per step (step, free)")
    cols = {"step/free": [], "step/gloo": [], "cpu extra": []}
    for i, d in sorted(per.items()):
        sf, sg = d.get("saker.step_over_free"), (d["saker.step"] / d["gloo.step"] if "saker.step" in d and "gloo.step" in d else None)
        sc, fc, gc = d.get("saker.step_cpu"), d.get("saker.free_cpu"), d.get("gloo.step_cpu")
        if sf: cols["step/free"].append(sf)
        if sg: cols["step/gloo"].append(sg)
        if sc and fc: cols["cpu extra"].append(sc / fc)
        ms = lambda x: f"{x*1e3:6.1f}" if x else "   n/a"
        print(f"  round {i}: step/free {sf or float('nan'):.3f}, step/gloo {sg or float('nan'):.3f}; "
              f"cpu saker {ms(sc)} / {ms(fc)}, gloo {ms(gc)} / {ms(d.get('gloo.free_cpu'))}")
    for k, xs in cols.items():
        if xs: print(f"  {k:10s} median {statistics.median(xs):.3f} (min {min(xs):.3f}, max {max(xs):.3f}, {len(xs)} rounds)")
print("\nload average (1 min) at each run's start>end; the machine is shared")
by_round = {}
for line in open(sys.argv[3]):
    i, tag, l0, l1 = line.split()
    by_round.setdefault(i, []).append(f"{tag} {l0}>{l1}")
for i, runs in by_round.items():
    print(f"  round {i}: " + ", ".join(runs))
PY
