#!/usr/bin/env bash
# saker.torch on the real local cluster: the examples through examples/torch/train.sbatch
# (saker-run -> srun --mpi=pmi2, 2 nodes x 2 ranks): hvd and DDP over the saker backend
# give one parameter hash on every rank and the same hash as each other, and the Horovod
# API checks pass with cross_rank/cross_size seeing 2 nodes; a preempted job checkpoints,
# is requeued and ends with the uninterrupted hash.
source "$(dirname "$0")/lib.sh"
it_require_root
/usr/bin/python3 -c 'import torch' 2>/dev/null || { echo "SKIP: /usr/bin/python3 cannot import torch"; exit 77; }
[[ -e "$SAKER_BUILDDIR/python/saker/_comm.so" ]] || { echo "SKIP: saker's Python package not built (--enable-python)"; exit 77; }
it_cluster_up --nodes 2 --gpus-per-node 0 --cpus-per-node 4 --no-job-submit
it_jobs_as_user
export PYTHONPATH="$SAKER_BUILDDIR/python" PATH="$SAKER_BUILDDIR/launcher/saker-run:$PATH"
ex="$SAKER_SRCDIR/examples/torch"
hashes() { grep ' params ' "$1" | awk '{print $4}' | sort -u; }

assert_rc 0 "Horovod API checks, 2 nodes x 2 ranks" -- sbatch -W -p all -N2 --ntasks-per-node=2 \
  -o "$IT_PREFIX/api.out" --wrap "exec saker-run -- /usr/bin/python3 $SAKER_SRCDIR/tests/python/hvd_api_check.py"
for r in 0 1 2 3; do
  assert_contains "$(cat "$IT_PREFIX/api.out")" "hvd-api ok rank $r/4 local $((r % 2))/2 cross $((r / 2))/2" "rank $r passes"
done
for s in "train_hvd.py" "train_ddp.py --backend saker"; do
  name=${s%%.py*}
  assert_rc 0 "$name through train.sbatch" -- it_job env SAKER_CKPT_DIR="$IT_PREFIX/ck-$name" sbatch -W -p all -N2 \
    --ntasks-per-node=2 -o "$IT_PREFIX/$name.out" "$ex/train.sbatch" $ex/$s --steps 10
  assert_eq "$(grep -c ' params ' "$IT_PREFIX/$name.out")" 4 "$name: every rank prints its hash"
  assert_eq "$(hashes "$IT_PREFIX/$name.out" | wc -l)" 1 "$name: one hash on every rank"
done
assert_eq "$(hashes "$IT_PREFIX/train_hvd.out")" "$(hashes "$IT_PREFIX/train_ddp.out")" "hvd and DDP/saker: the same parameters"

# Preemption: after step 4 rank 0 has `scancel --signal=USR1 -b` reach saker-run (the batch
# shell), which forwards it; the ranks write an emergency checkpoint at the next step
# boundary and exit; saker-run requeues; the requeued job resumes to the same hash.
job=$(it_job env SAKER_CKPT_DIR="$IT_PREFIX/ck-pre" SAKER_EXAMPLE_PREEMPT=4:scancel sbatch --parsable -p all -N2 \
  --ntasks-per-node=2 --open-mode=append -o "$IT_PREFIX/pre.out" "$ex/train.sbatch" "$ex/train_hvd.py" --steps 10)
assert_eq COMPLETED "$(it_job_wait "$job" 300)" "the preempted job is requeued and completes"
text=$(cat "$IT_PREFIX/pre.out")
assert_contains "$text" "stopped by SIGUSR1: emergency checkpoint of step" "the ranks took an emergency checkpoint"
assert_contains "$text" "requeue: preempted" "saker-run requeued the job"
assert_contains "$text" "resumed from step" "the requeued job resumed from it"
assert_eq "$(hashes "$IT_PREFIX/pre.out")" "$(hashes "$IT_PREFIX/train_hvd.out")" "preempted and requeued: the uninterrupted hash"
it_finish
