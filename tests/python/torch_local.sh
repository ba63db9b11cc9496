#!/usr/bin/env bash
# saker.torch with Debian's own torch, ranks under saker-run --local (no Slurm needed):
# Horovod's API semantics; the same parameters on every rank, bitwise run to run, equal
# to Gloo's DDP and to one process on the global batch; a killed rank resumes from its
# checkpoint to the uninterrupted hash, and so does a preempted run; checkpoints are
# libsaker_ckpt's (named datasets, a damaged one skipped); mismatched tensor names give a
# stall report; issue 29's Horovod semantics, mismatch errors and repeated shutdown()/init().
source "$(dirname "$0")/../integration/lib.sh"
py=/usr/bin/python3
$py -c 'import torch' 2>/dev/null || { echo "SKIP: $py cannot import torch (apt-get install python3-torch)"; exit 77; }
export PYTHONPATH="$SAKER_BUILDDIR/python${PYTHONPATH:+:$PYTHONPATH}"
run="$SAKER_BUILDDIR/launcher/saker-run/saker-run"
ex="$SAKER_SRCDIR/examples/torch"
tmp=$(mktemp -d /tmp/saker-torch-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/python_for_build.sh"
py=$(python_for_build "$py" "$tmp")
steps=12

# hash_of OUTPUT RANK: the parameter hash RANK printed.
hash_of() { sed -n "s|^rank $2/[0-9]* params \([0-9a-f]*\)\$|\1|p" <<<"$1" | tail -1; }
# same_on_ranks OUTPUT N: every rank printed one hash, the same.
same_on_ranks() { [[ $(grep -c ' params ' <<<"$1") == "$2" && $(grep ' params ' <<<"$1" | awk '{print $4}' | sort -u | wc -l) == 1 ]]; }

assert_rc 0 "Horovod API checks, 3 ranks" -- "$run" --local -n 3 --max-restarts 0 -- $py "$SAKER_SRCDIR/tests/python/hvd_api_check.py"
for r in 0 1 2; do assert_contains "$IT_OUT" "hvd-api ok rank $r/3 local $r/3 cross 0/1" "rank $r passes"; done
assert_rc 0 "the saker backend, collective by collective, 3 ranks" -- "$run" --local -n 3 --max-restarts 0 -- $py "$SAKER_SRCDIR/tests/python/backend_check.py"
for r in 0 1 2; do assert_contains "$IT_OUT" "backend ok rank $r/3" "backend checks pass on rank $r"; done
# Issue 29: Horovod's semantics (autograd, integer and fp16 numerics, the collectives built
# over the others, error types), every class of cross-rank mismatch raising the same error
# on every rank (never a hang, never reinterpreted bytes), and shutdown()/init() repeated.
# ranks_ok OUTPUT MODE: how many ranks printed "compat ok MODE" (the ranks' lines may interleave).
ranks_ok() { grep -o "compat ok $2 rank [0-9]*/[0-9]*" <<<"$1" | sort -u | wc -l; }
for n in 2 3; do
  assert_rc 0 "Horovod semantics, $n ranks" -- env SAKER_COMM_TIMEOUT=30 "$run" --local -n $n --max-restarts 0 -- \
    $py "$SAKER_SRCDIR/tests/python/hvd_compat_check.py" semantics
  assert_eq "$(ranks_ok "$IT_OUT" semantics)" "$n" "every rank passes ($n ranks)"
  assert_rc 0 "cross-rank mismatches, $n ranks" -- env SAKER_COMM_TIMEOUT=30 "$run" --local -n $n --max-restarts 0 -- \
    $py "$SAKER_SRCDIR/tests/python/hvd_compat_check.py" mismatch
  assert_eq "$(ranks_ok "$IT_OUT" mismatch)" "$n" "every rank raised each mismatch alike ($n ranks)"
  assert_contains "$IT_OUT" "broadcast of tensor 'bc.root': the ranks disagree (root differs: rank 0 0, rank 1 1" \
    "a root mismatch names each rank's root"
done
# libsaker_comm's native alltoall, reduce-scatter and product (issue 29), through hvd and the
# torch.distributed backend, and the library's own refusals of mismatched counts and dtypes.
for n in 2 3; do
  for mode in hvd backend mismatch; do
    assert_rc 0 "native alltoall/reducescatter/product: $mode, $n ranks" -- env SAKER_COMM_TIMEOUT=30 \
      "$run" --local -n $n --max-restarts 0 -- $py "$SAKER_SRCDIR/tests/python/hvd_native_check.py" $mode
    assert_eq "$(grep -o "native ok $mode rank [0-9]*/$n" <<<"$IT_OUT" | sort -u | wc -l)" "$n" "every rank passes ($mode, $n ranks)"
  done
done
# Replicas stay bitwise identical: rank-distinct fp16/bf16/fp32 data, whose sums depend on
# their order, allreduced alone, fused and grouped, in place and async, on every transport.
for tr in ring shm auto; do
  assert_rc 0 "the same allreduce bits on every rank, 3 ranks, $tr" -- env SAKER_COMM_TIMEOUT=30 SAKER_COMM_TRANSPORT=$tr \
    "$run" --local -n 3 --max-restarts 0 -- $py "$SAKER_SRCDIR/tests/python/hvd_replica_check.py"
  assert_eq "$(grep -o "replica ok rank [0-9]*/3 $tr" <<<"$IT_OUT" | sort -u | wc -l)" 3 "every rank received the same bits ($tr)"
done
assert_rc 0 "shutdown() then init(), 1000 times, 2 ranks" -- env SAKER_COMM_TIMEOUT=30 "$run" --local -n 2 --max-restarts 0 -- \
  $py "$SAKER_SRCDIR/tests/python/hvd_compat_check.py" lifecycle 1000
assert_eq "$(ranks_ok "$IT_OUT" lifecycle)" 2 "both ranks re-initialized 1000 times"
assert_rc 0 "shutdown() then init(), 200 times, 3 ranks" -- env SAKER_COMM_TIMEOUT=30 "$run" --local -n 3 --max-restarts 0 -- \
  $py "$SAKER_SRCDIR/tests/python/hvd_compat_check.py" lifecycle 200
assert_eq "$(ranks_ok "$IT_OUT" lifecycle)" 3 "three ranks re-initialized 200 times"
# CUDA tensors, where this torch has CUDA (Debian's has not; gpu_machine.sh runs it elsewhere).
if $py -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  assert_rc 0 "the saker backend and hvd on CUDA tensors, 1 rank (NCCL)" -- "$run" --local -n 1 --max-restarts 0 -- \
    $py "$SAKER_SRCDIR/tests/python/backend_gpu_check.py" --expect nccl
else
  echo "note: $py's torch has no CUDA device: tests/python/backend_gpu_check.py not run"
fi

assert_rc 0 "Horovod-style training, 2 ranks" -- "$run" --local -n 2 -- $py "$ex/train_hvd.py" --steps $steps --save-params "$tmp/hvd.pt"
hvd1=$IT_OUT
assert_rc 0 "the same run again" -- "$run" --local -n 2 -- $py "$ex/train_hvd.py" --steps $steps
hvd2=$IT_OUT
same_on_ranks "$hvd1" 2 && it_pass "parameters identical on every rank" || it_fail "parameters differ across ranks: $hvd1"
assert_eq "$(hash_of "$hvd1" 0)" "$(hash_of "$hvd2" 0)" "bitwise repeatable run to run"

assert_rc 0 "DDP over the saker backend" -- "$run" --local -n 2 -- $py "$ex/train_ddp.py" --backend saker --steps $steps --save-params "$tmp/saker.pt"
ddp=$IT_OUT
same_on_ranks "$ddp" 2 && it_pass "DDP/saker: identical on every rank" || it_fail "DDP/saker ranks differ: $ddp"
assert_rc 0 "DDP over gloo" -- "$run" --local -n 2 -- $py "$ex/train_ddp.py" --backend gloo --steps $steps --save-params "$tmp/gloo.pt"
assert_eq "$(hash_of "$ddp" 0)" "$(hash_of "$IT_OUT" 0)" "DDP over saker and over gloo: the same parameters, bitwise"
assert_rc 0 "one process, global batch" -- $py "$ex/train_ddp.py" --single --steps $steps --save-params "$tmp/single.pt"
assert_rc 0 "hvd, saker DDP, gloo DDP and one process agree to fp32 tolerance" -- $py -c "
import sys, torch
ref = torch.load('$tmp/single.pt')
for k in ('hvd', 'saker', 'gloo'):
    got = torch.load('$tmp/%s.pt' % k)
    worst = max((got[n] - ref[n]).abs().max().item() for n in ref)
    print(k, 'max |diff| vs one process', worst)
    if worst > 1e-5: sys.exit(1)"

# Fault: rank 1 dies after step 7 on the first attempt; the restart resumes from step 5.
for script in train_hvd train_ddp; do
  assert_rc 0 "$script: rank 1 killed mid-training, saker-run restarts" -- env SAKER_EXAMPLE_KILL=1:7 \
    "$run" --local -n 2 --max-restarts 1 --ckpt-dir "$tmp/ck-$script" -- $py "$ex/$script.py" --steps $steps
  assert_contains "$IT_OUT" "resumed from step 5" "$script resumes from its checkpoint"
  assert_eq "$(hash_of "$IT_OUT" 0)" "$(hash_of "$hvd1" 0)" "$script after the kill: the uninterrupted hash"
done

# Preemption: SIGUSR1 to saker-run after step 7; the ranks write an emergency checkpoint
# at the next step boundary and exit; the next run resumes from it to the same hash.
for script in train_hvd train_ddp; do
  assert_rc 75 "$script: preempted (saker-run --local stops with the ranks' 75 instead of requeueing)" -- env SAKER_EXAMPLE_PREEMPT=7 \
    "$run" --local -n 2 --ckpt-dir "$tmp/pre-$script" -- $py "$ex/$script.py" --steps $steps
  assert_contains "$IT_OUT" "stopped by SIGUSR1: emergency checkpoint of step 8 committed" "$script: emergency checkpoint"
  assert_rc 0 "$script: run again" -- "$run" --local -n 2 --ckpt-dir "$tmp/pre-$script" -- $py "$ex/$script.py" --steps $steps
  assert_contains "$IT_OUT" "resumed from step 8" "$script resumes from the emergency checkpoint"
  assert_eq "$(hash_of "$IT_OUT" 0)" "$(hash_of "$hvd1" 0)" "$script after preemption: the uninterrupted hash"
done

# Ctrl-C: SIGINT to the whole process group, as a terminal sends it (set -m: a job of its own,
# SIGINT not ignored). The same emergency checkpoint as SIGTERM, exit 75, and the next run
# resumes from it (issue 31 §4).
set -m
"$run" --local -n 2 --ckpt-dir "$tmp/int" -- $py "$ex/train_hvd.py" --steps 100000 >"$tmp/int.log" 2>&1 &
int_pid=$!
set +m
it_wait_for 120 "train_hvd wrote its first checkpoint (then Ctrl-C)" eval 'ls "$tmp/int" | grep -q "^ckpt-[0-9]*\.h5$"'
kill -INT -- "-$int_pid"
wait "$int_pid" && rc=0 || rc=$?
assert_eq 75 "$rc" "train_hvd: Ctrl-C of saker-run --local exits 75"
assert_contains "$(cat "$tmp/int.log")" "stopped by SIGINT: emergency checkpoint of step" "train_hvd: Ctrl-C gets the emergency checkpoint"
assert_contains "$(cat "$tmp/int.log")" "interrupted (SIGINT received, emergency checkpoint committed): stopping; run again to resume" \
  "saker-run says it was interrupted and how to resume"
step=$(sed -n 's/.*stopped by SIGINT: emergency checkpoint of step \([0-9]*\).*/\1/p' "$tmp/int.log")
assert_rc 0 "train_hvd: run again after Ctrl-C" -- "$run" --local -n 2 --ckpt-dir "$tmp/int" -- $py "$ex/train_hvd.py" --steps $((step + 2))
assert_contains "$IT_OUT" "resumed from step $step" "train_hvd resumes from the Ctrl-C checkpoint"

# saker-ckpt show says what a torch checkpoint's config holds, never its base64 pickle (issue 31 §8).
main_ckpt=$(ls "$tmp"/pre-train_hvd/ckpt-*.h5 | grep -v shard | tail -n 1)
assert_rc 0 "saker-ckpt show of a saker.torch checkpoint" -- "$SAKER_BUILDDIR/ckpt/saker-ckpt/saker-ckpt" show "$main_ckpt"
assert_contains "$IT_OUT" "config:         saker.torch/1: PyTorch state pickled by saker.torch.checkpoint" \
  "its config is named for what it is"
assert_contains "$IT_OUT" "model: 6 tensors (conv1.weight, conv1.bias" "its summary names the model's tensors"
assert_contains "$IT_OUT" "optimizer: 1 param group(s) lr=" "and the optimizer's settings"
assert_not_contains "$IT_OUT" '"meta": "' "the pickle itself is not printed"

# The checkpoints are libsaker_ckpt's: one HDF5 dataset per parameter, for h5py.
assert_rc 0 "h5py sees the parameters by name" -- $py -c "
import glob, h5py
f = h5py.File(sorted(p for p in glob.glob('$tmp/ck-train_hvd/ckpt-*.h5') if 'shard' not in p)[-1])
names = set(f['shard_00000/tensors'])
assert {'model:conv1.weight', 'model:fc.bias', 'optim:0:momentum_buffer'} <= names, names"

# A damaged newest checkpoint is skipped: the run falls back to the previous one.
newest=$(ls "$tmp/ck-train_hvd"/ckpt-*.h5 | grep -v shard | tail -1)
printf 'garbagegarbage' | dd of="$newest" bs=1 seek=$(($(stat -c %s "$newest") / 2)) conv=notrunc status=none
assert_rc 0 "a damaged newest checkpoint" -- "$run" --local -n 2 -- $py "$ex/train_hvd.py" --steps $((steps + 3)) --ckpt-dir "$tmp/ck-train_hvd"
assert_contains "$IT_OUT" "checksum mismatch" "the damaged checkpoint is reported"
assert_contains "$IT_OUT" "resumed from step 5" "and the previous one is used"

assert_rc 1 "tensor names that differ across ranks" -- env SAKER_STALL_WARNING_S=1 SAKER_STALL_ABORT_S=2 \
  "$run" --local -n 2 --max-restarts 0 -- $py "$SAKER_SRCDIR/tests/python/hvd_api_check.py" mismatch
assert_contains "$IT_OUT" "tensor 'layer.only_on_rank0.weight' was submitted by rank(s) 0 but rank 1" \
  "the stall report names the parameter and the rank that lacks it"
assert_contains "$IT_OUT" "saker.torch.runtime.HorovodInternalError" \
  "the aborted stall reaches the script as Horovod's HorovodInternalError"
it_finish
