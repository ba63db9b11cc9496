#!/usr/bin/env bash
# Real client: a PyTorch DDP script (Debian's python3-torch, gloo, CPU) runs unchanged
# through saker-run on the local cluster, as plain processes (no torchrun): every rank
# sees the right RANK/WORLD_SIZE/LOCAL_RANK, and allreduce and a DDP step give the
# expected results.
source "$(dirname "$0")/lib.sh"
it_require_root
/usr/bin/python3 -c 'import torch.distributed' 2>/dev/null || {
  echo "SKIP: /usr/bin/python3 cannot import torch (apt-get install python3-torch)"
  exit 77
}
it_cluster_up --nodes 2 --gpus-per-node 0 --cpus-per-node 4 --no-job-submit
it_jobs_as_user   # the jobs and the local run are an ordinary user's (issue 28)
run="$SAKER_BUILDDIR/launcher/saker-run/saker-run"
script="$SAKER_SRCDIR/tests/integration/torch_ddp.py"

assert_rc 0 "DDP over 2 nodes x 2 ranks" -- \
  sbatch -W -p all -N2 --ntasks-per-node=2 -o "$IT_PREFIX/ddp.out" --wrap "exec $run -- /usr/bin/python3 $script"
text=$(cat "$IT_PREFIX/ddp.out")
for r in 0 1 2 3; do
  assert_contains "$text" "ddp-check rank $r/4 local $((r % 2))/2 allreduce 10 ok" "rank $r passes its checks"
done
assert_not_contains "$text" "FAILED" "no rank failed a check"

assert_rc 0 "DDP with saker-run --local -n 3" -- it_job "$run" --local -n 3 -- /usr/bin/python3 "$script"
assert_contains "$IT_OUT" "ddp-check rank 2/3 local 2/3 allreduce 6 ok" "local ranks pass too"
it_finish
