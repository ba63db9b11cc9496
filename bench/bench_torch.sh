#!/usr/bin/env bash
# bench_torch.sh: saker.torch against its peers, measured side by side in this run (2 ranks,
# saker-run --local, CPU): DDP step time and allreduce time per step of a ~25M-parameter
# model over the saker backend vs Gloo, and a 64 MiB allreduce from Python vs the C++
# benchmark (bench_allreduce, same size, same machine). Saker also runs forced onto its
# TCP ring (SAKER_COMM_TRANSPORT=ring), the transport it uses between nodes. The machine is shared: runs are
# niced, interleaved for ROUNDS rounds, and the table shows median and min-max of the
# rounds. Usage: bench/bench_torch.sh [ROUNDS]   (run in the build tree, or set
# SAKER_BUILDDIR; default 3 rounds)
set -euo pipefail
rounds=${1:-3}
build=${SAKER_BUILDDIR:-$PWD}
src=${SAKER_SRCDIR:-$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)}
[[ -x $build/launcher/saker-run/saker-run ]] || { echo "bench_torch: no saker-run under $build; run it in the build tree" >&2; exit 1; }
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1
run="$build/launcher/saker-run/saker-run"
out=$(mktemp); trap 'rm -f "$out"' EXIT
for ((i = 1; i <= rounds; i++)); do
  echo "round $i/$rounds" >&2
  for b in saker gloo; do
    nice "$run" --local -n 2 -- /usr/bin/python3 "$src/bench/bench_torch.py" ddp $b | grep '^result' >> "$out"
  done
  # Saker's TCP ring, as between nodes (Gloo always uses TCP on 127.0.0.1).
  SAKER_COMM_TRANSPORT=ring nice "$run" --local -n 2 -- /usr/bin/python3 "$src/bench/bench_torch.py" ddp saker saker-tcp |
    grep '^result' >> "$out"
  nice "$run" --local -n 2 -- /usr/bin/python3 "$src/bench/bench_torch.py" fused | grep '^result' >> "$out"
  # The C++ benchmark's 64 MiB allreduce (Saker, one node, np 2): its busbw equals algbw
  # at np=2, so the time is bytes / busbw.
  nice "$build/bench/bench_allreduce" --quick --rounds 1 --sizes 67108864 --modes one-node 2>/dev/null |
    awk '$1 == 67108864 {printf "result cxx.raw64 %.6f\n", 67108864 / ($2 * 1e9); exit}' >> "$out" || true
done
/usr/bin/python3 - "$out" <<'PY'
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
s, g = show("saker.allreduce", "allreduce per step, saker backend"), show("gloo.allreduce", "allreduce per step, gloo backend")
if s and g: print(f"{'  ratio saker/gloo (target <= 0.5)':44s} {s/g:9.2f}")
t, ts = show("saker-tcp.allreduce", "allreduce per step, saker, TCP ring"), show("saker-tcp.step", "DDP step, saker, TCP ring")
if t and g: print(f"{'  ratio saker TCP ring/gloo (target <= 0.8)':44s} {t/g:9.2f}")
f, r, c = (show("python.fused64", "64 MiB allreduce, Python, fusion buffer"), show("python.raw64", "64 MiB allreduce, Python, one call"),
           show("cxx.raw64", "64 MiB allreduce, C++ bench_allreduce"))
if f and c: print(f"{'  ratio Python fused / C++ (target <= 1.10)':44s} {f/c:9.2f}")
if r and c: print(f"{'  ratio Python one call / C++':44s} {r/c:9.2f}")
PY
