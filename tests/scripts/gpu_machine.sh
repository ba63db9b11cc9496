#!/usr/bin/env bash
# gpu_machine.sh: Saker's GPU checks on a machine that has a GPU and a CUDA build of torch
# but none of Saker's build dependencies (Slurm, HDF5, hwloc...), e.g. a lent CUDA box.
#
#   gpu_machine.sh bundle BUILD DEST   (here) copy the built programs in BUILD's layout,
#                                      plus the shared libraries they need that are not
#                                      glibc, libstdc++, CUDA or NCCL, into DEST
#   gpu_machine.sh run DEST OUTDIR     (there) build saker._comm for that python3, then run
#                                      the checks; a log per step and summary.txt in OUTDIR
#
# The checks: comm_nccl_check and train_gpu_check (C++, NCCL), test_comm's NCCL device
# cases, tests/python/backend_gpu_check.py (the saker backend and Horovod's API on CUDA
# tensors; one rank takes NCCL, two ranks sharing the GPU take host memory), the CPU
# checks of the Python package under that machine's torch (backend_check, hvd_api_check,
# DDP saker vs gloo, a torchrun launch), and one round of bench_torch.sh. Each step has
# its own time limit; run exits 1 if any step failed. GPU_BENCH_ROUNDS sets the
# benchmark's rounds (default 1; 0 skips it).
set -uo pipefail
src=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; }

bundle() {
  local build=$1 dest=$2 f
  [[ -x $build/launcher/saker-run/saker-run ]] || { echo "gpu_machine: no built tree at '$build' (make first)" >&2; exit 2; }
  rm -rf "$dest" && mkdir -p "$dest/lib"
  for f in launcher/saker-run/saker-run tests/unit/comm_nccl_check tests/unit/train_gpu_check tests/unit/test_comm \
           bench/bench_allreduce; do
    [[ -x $build/$f ]] || { echo "gpu_machine: $build/$f is not built" >&2; exit 2; }
    mkdir -p "$dest/$(dirname "$f")" && cp "$build/$f" "$dest/$f" && strip --strip-debug "$dest/$f"
  done
  cp -L "$build/launcher/.libs/libsaker_comm.so.0" "$dest/lib/" && strip --strip-debug "$dest/lib/libsaker_comm.so.0"
  # Everything ldd resolves except what the target machine brings (glibc, the C++
  # runtime, CUDA, NCCL: its torch has its own).
  ldd "$dest"/*/*/* "$dest"/*/* "$dest/lib/libsaker_comm.so.0" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}' |
    sort -u | grep -Ev '/(libc|libm|libpthread|librt|libdl|libresolv|ld-linux[^/]*|libstdc\+\+|libgcc_s|libcudart|libnccl)\.so' |
    while read -r f; do cp -L "$f" "$dest/lib/"; done
  du -sh "$dest"
}

run() {
  local b=$1 out=$2 py ok=0 bad=0
  mkdir -p "$out"
  b=$(cd "$b" && pwd)
  py=$(command -v python3)
  summary() { echo "$*" | tee -a "$out/summary.txt"; }
  # step NAME LIMIT CMD...: runs CMD with a time limit, its output in OUTDIR/NAME.log.
  step() {
    local name=$1 limit=$2 rc t0=$SECONDS
    shift 2
    timeout -k 5 "$limit" "$@" >"$out/$name.log" 2>&1
    rc=$?
    case $rc in
      0) ok=$((ok + 1)); summary "PASS $name ($((SECONDS - t0)) s)" ;;
      77) summary "SKIP $name: $(grep -m1 SKIP "$out/$name.log")" ;;
      *) bad=$((bad + 1)); summary "FAIL $name (rc $rc, $((SECONDS - t0)) s): $(tail -3 "$out/$name.log" | tr '\n' ' ')" ;;
    esac
    return $rc
  }
  {
    nvidia-smi -L; uname -r; nproc; "$py" -V
    "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())'
    g++ --version | head -1
  } >"$out/machine.txt" 2>&1
  cat "$out/machine.txt"
  # NCCL: the one torch loads (pip's nvidia-nccl), so that one process holds one NCCL.
  local nccl
  nccl=$("$py" -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null)
  [[ -e $nccl/libnccl.so.2 ]] || nccl=/usr/local/cuda/lib64
  # The carried libraries last: where that machine has its own (OpenSSL, curl...), its
  # python3 and torch keep them.
  export LD_LIBRARY_PATH="$nccl:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:$b/lib"
  summary "machine: $(head -1 "$out/machine.txt"); NCCL from $nccl"

  step comm_nccl_check 60 "$b/tests/unit/comm_nccl_check"
  step test_comm_nccl_device 60 "$b/tests/unit/test_comm" "nccl device*"
  step train_gpu_check 240 "$b/tests/unit/train_gpu_check"

  # saker._comm for this python3 (its ABI, its pybind11), against the carried libsaker_comm.
  local stage=$b/python
  mkdir -p "$stage/saker/torch"
  cp "$src"/python/saker/__init__.py "$stage/saker/" && cp "$src"/python/saker/torch/*.py "$stage/saker/torch/"
  local inc  # pip's pybind11 says where it and Python.h are; else Python's own include dir
  inc=$("$py" -m pybind11 --includes 2>/dev/null) ||
    inc="-I$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
  step build_python_ext 180 g++ -std=c++20 -O2 -fPIC -shared -fvisibility=hidden -I"$src/include" \
    $inc "$src/python/saker/_comm.cpp" -o "$stage/saker/_comm$("$py" -c \
    'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')" -L"$b/lib" -l:libsaker_comm.so.0 \
    -Wl,-rpath,"$b/lib" || { summary "RESULT $ok passed, $bad failed (no Python extension)"; return 1; }
  export PYTHONPATH=$stage OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
  local sr=$b/launcher/saker-run/saker-run t=$src/tests/python
  if "$py" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
    step gpu_one_rank_nccl 180 "$sr" --local -n 1 --max-restarts 0 -- "$py" "$t/backend_gpu_check.py" --expect nccl
    step gpu_two_ranks_share 180 "$sr" --local -n 2 --max-restarts 0 -- "$py" "$t/backend_gpu_check.py" --expect host
  else
    summary "SKIP gpu checks: $py's torch has no CUDA device"
  fi
  step cpu_backend_check 120 "$sr" --local -n 3 --max-restarts 0 -- "$py" "$t/backend_check.py"
  step cpu_hvd_api_check 180 "$sr" --local -n 3 --max-restarts 0 -- "$py" "$t/hvd_api_check.py"
  step cpu_backend_torchrun 120 "$py" -m torch.distributed.run --standalone --nproc_per_node=2 "$t/backend_check.py"
  local ex=$src/examples/torch
  step cpu_ddp_saker 180 "$sr" --local -n 2 -- "$py" "$ex/train_ddp.py" --backend saker --steps 8
  step cpu_ddp_gloo 180 "$sr" --local -n 2 -- "$py" "$ex/train_ddp.py" --backend gloo --steps 8
  local hs hg
  hs=$(sed -n 's|^rank 0/2 params ||p' "$out/cpu_ddp_saker.log" | tail -1)
  hg=$(sed -n 's|^rank 0/2 params ||p' "$out/cpu_ddp_gloo.log" | tail -1)
  if [[ -n $hs && $hs == "$hg" ]]; then ok=$((ok + 1)); summary "PASS DDP saker and gloo: the same parameter hash $hs"
  else bad=$((bad + 1)); summary "FAIL DDP saker '$hs' vs gloo '$hg'"; fi
  if [[ ${GPU_BENCH_ROUNDS:-1} != 0 ]]; then
    SAKER_BUILDDIR=$b SAKER_PYTHON=$py step bench_torch 400 bash "$src/bench/bench_torch.sh" "${GPU_BENCH_ROUNDS:-1}"
    grep -v 'UserWarning\|register_backend' "$out/bench_torch.log" >>"$out/summary.txt"
  fi
  summary "RESULT $ok passed, $bad failed"
  ((bad == 0))
}

case ${1:-} in
  bundle) (($# == 3)) || { usage >&2; exit 2; }; bundle "$2" "$3" ;;
  run) (($# == 3)) || { usage >&2; exit 2; }; run "$2" "$3" ;;
  -h | --help) usage ;;
  *) usage >&2; exit 2 ;;
esac
