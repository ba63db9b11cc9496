#!/usr/bin/env bash
# spank_saker.so binds every task of a real srun step to its GPU, cores, NUMA node and
# NICs, and the result is exactly what `saker-topo plan` prints for the same inputs.
#
# The node's topology comes from plugstack (topology=FILE): a fixture whose PUs are this
# machine's real CPUs 0 and 1, so sched_setaffinity really happens and each task's
# /proc/self/status shows it. The fake GPUs are saker-cluster's character devices.
source "$(dirname "$0")/lib.sh"
it_require_root

topo="$SAKER_SRCDIR/tests/data/topo-itest-2cpu-4gpu.xml"
saker_topo="$SAKER_BUILDDIR/plugins/affinity/saker-topo/saker-topo"
it_cluster_up --nodes 1 --gpus-per-node 4 --cpus-per-node 4 --no-job-submit --spank-args "topology=$topo"
it_jobs_as_user
plugstack="$(dirname "$SLURM_CONF")/plugstack.conf"

# What each task reports: its real CPU affinity, the variables, and its memory policy
# (get_mempolicy: mode 2 = MPOL_BIND, node mask 1 = NUMA node 0).
probe='cpus=$(awk "/^Cpus_allowed_list/ {print \$2}" /proc/self/status)
mempolicy=$(/usr/bin/python3 -c "import ctypes; l=ctypes.CDLL(None); m=ctypes.c_int(); n=(ctypes.c_ulong*16)(); l.syscall(239, ctypes.byref(m), n, 1025, None, 0); print(\"%d:%d\" % (m.value, n[0]))")
echo "rank=$SLURM_LOCALID cpus=$cpus CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES NCCL_IB_HCA=$NCCL_IB_HCA UCX_NET_DEVICES=$UCX_NET_DEVICES OMP_NUM_THREADS=$OMP_NUM_THREADS mempolicy=$mempolicy"'

# expected_plan NTASKS GPUS: saker-topo's plan for slurmstepd's CPUs (0-1 here), cut
# down to the fields the probe prints, one line per rank.
expected_plan() {
  "$saker_topo" plan --topology "$topo" --ntasks-per-node "$1" --gpus "$2" --cpuset 0-1 --format env |
    awk '{ line = $1
           for (i = 2; i <= NF; i++)
             if ($i ~ /^(cpus|CUDA_VISIBLE_DEVICES|NCCL_IB_HCA|UCX_NET_DEVICES|OMP_NUM_THREADS)=/) line = line " " $i
           print line " mempolicy=2:1" }' | sort
}

# check_step DESC NTASKS GPUS SRUN_ARGS...: the step's tasks report exactly the plan.
check_step() {
  local desc=$1 ntasks=$2 gpus=$3
  shift 3
  local expected
  expected=$(expected_plan "$ntasks" "$gpus")
  assert_rc 0 "$desc: srun runs" -- srun "$@" bash -c "$probe"
  assert_eq "$expected" "$(grep '^rank=' <<<"$IT_OUT" | sort)" "$desc: every task matches saker-topo plan"
}

check_step "--gpus-per-task=1 -n4" 4 0-3 -n4 --gpus-per-task=1
check_step "--gres=gpu:4 -n4" 4 0-3 --gres=gpu:4 -n4
check_step "--gres=gpu:2 -n2" 2 0-1 --gres=gpu:2 -n2
# Spot-check the plan itself, so a planner bug cannot hide behind a matching CLI.
assert_contains "$(expected_plan 4 0-3)" \
  "rank=3 cpus=1 CUDA_VISIBLE_DEVICES=3,0,1,2 NCCL_IB_HCA==mlx5_1:1 UCX_NET_DEVICES=mlx5_1:1 OMP_NUM_THREADS=1" \
  "rank 3 owns GPU 3, shares CPU 1 and uses the HCA behind its switch"

# explain: the same table saker-topo prints, on the task's stderr.
table=$("$saker_topo" plan --topology "$topo" --ntasks-per-node 4 --gpus 0-3 --cpuset 0-1)
assert_rc 0 "--gpu-affinity=explain runs" -- srun -n4 --gres=gpu:4 --gpu-affinity=explain true
while IFS= read -r line; do
  assert_contains "$IT_OUT" "$line" "explain prints the plan line: ${line:0:40}"
done <<<"$table"
assert_contains "$IT_OUT" "saker: rank 2 bound to CPUs 1, NUMA node 0, GPU 2" "explain says what each task got"

# none: the task stays as Slurm launched it.
assert_rc 0 "--gpu-affinity=none runs" -- srun -n1 --gres=gpu:4 --gpu-affinity=none bash -c "$probe"
assert_contains "$IT_OUT" "rank=0 cpus=0-1 CUDA_VISIBLE_DEVICES=0,1,2,3 NCCL_IB_HCA= UCX_NET_DEVICES=" \
  "with none the task is unbound and Slurm's CUDA_VISIBLE_DEVICES stays"

assert_rc 255 "a bad --gpu-affinity mode is refused" -- srun -n1 --gpu-affinity=closest true
assert_contains "$IT_OUT" "unknown mode 'closest'" "the refusal names the mode"

# Impossible plans and broken topologies: unbound with a warning, or a failure under strict.
assert_rc 0 "more ranks than GPUs: the tasks still run" -- srun -n2 --gres=gpu:1 bash -c "$probe"
assert_contains "$IT_OUT" "2 ranks on this node but the step has 1 GPU(s)" "the warning gives the reason"
assert_contains "$IT_OUT" "the task runs unbound" "the warning says the task is unbound"
assert_contains "$IT_OUT" "rank=1 cpus=0-1" "the task really is unbound"

# gres.conf cross-check: the cluster's gres.conf agrees with the fixture; a deliberately
# wrong one (Cores= off the GPUs' cores, a GPU the node lacks) is reported by
# saker-topo check-gres and, at step start, in slurmd's log. slurmd read gres.conf when
# it started, so rewriting it now changes only what the plugin reads.
gres="$(dirname "$SLURM_CONF")/gres.conf"
node=$(awk -F'[= ]' '/^NodeName=/ { print $2; exit }' "$gres")
assert_rc 0 "check-gres: the cluster's gres.conf agrees with the topology" -- \
  "$saker_topo" check-gres "$gres" --topology "$topo" --node "$node"
cp "$gres" "$gres.orig"
sed -i -e "s|^\(NodeName=$node Name=gpu .*\)$|\1 Cores=1|" "$gres"
echo "NodeName=$node Name=gpu File=$IT_PREFIX/nodes/$node/dev/nvidia7" >>"$gres"
assert_rc 1 "check-gres: a wrong gres.conf is refused" -- "$saker_topo" check-gres "$gres" --topology "$topo" --node "$node"
assert_contains "$IT_OUT" "has Cores=1, but GPU 0 (0000:02:00.0) is local to cores 0-1" "check-gres names the wrong cores"
assert_contains "$IT_OUT" "names GPU 7, but the topology has 4 GPU(s)" "check-gres names the missing device"
assert_rc 0 "a step on a node whose gres.conf disagrees still runs" -- srun -n1 --gres=gpu:1 true
assert_contains "$(cat "$IT_PREFIX"/log/slurmd-*.log)" "gres.conf disagrees with the topology: gres.conf line" \
  "slurmd's log says gres.conf disagrees"
assert_contains "$(cat "$IT_PREFIX"/log/slurmd-*.log)" "names GPU 7, but the topology has 4 GPU(s)" \
  "slurmd's log names the disagreement"
mv "$gres.orig" "$gres"
# Steps read the topology from a compact cache in slurmd's spool (SlurmdSpoolDir's %n is
# the node's Slurm name, not this host's), written by the first step.
assert_rc 0 "the compact topology cache is in the node's spool" -- test -s "$IT_PREFIX/nodes/$node/spool/saker-topology.bin"
assert_contains "$(cat "$IT_PREFIX"/log/slurmd-*.log)" "topology (compact) in $IT_PREFIX/nodes/$node/spool/saker-topology.bin" \
  "slurmd's log says it was written"

# No test topology: the live one is discovered once, cached as XML, and read back by the
# next step (this machine: 2 CPUs, no GPUs, so a CPU-only plan).
cache="$IT_PREFIX/topology-cache.xml"
sed -i "s|topology=[^ ]*|topology=$cache|" "$plugstack"
assert_rc 0 "a step without a test topology runs" -- srun -n2 bash -c "$probe"
assert_rc 0 "the live topology was cached as hwloc XML" -- hwloc-info --input "$cache"
assert_contains "$(cat "$IT_PREFIX"/log/slurmd-*.log)" "cached this node's topology (hwloc XML) in $cache" "slurmd's log says so"
stamp=$(stat -c %Y.%i "$cache")
assert_rc 0 "the next step reads the cache" -- srun -n2 bash -c "$probe"
assert_eq "$stamp" "$(stat -c %Y.%i "$cache")" "the cache was not rewritten"
expected=$("$saker_topo" plan --topology "$cache" --ntasks-per-node 2 --cpuset 0-1 --format env |
  awk '{ print $1, $4, "CUDA_VISIBLE_DEVICES=" }')
assert_eq "$expected" "$(grep '^rank=' <<<"$IT_OUT" | sort | awk '{ print $1, $2, $3 }')" \
  "CPU-only tasks on the live topology match saker-topo plan"

broken="$IT_PREFIX/broken-topology.xml"
echo '<topology version="2.0"><object type="Machine"' >"$broken"
sed -i "s|topology=[^ ]*|topology=$broken|" "$plugstack"
assert_rc 0 "an unreadable topology: the task still runs" -- srun -n1 --gres=gpu:1 bash -c "$probe"
assert_contains "$IT_OUT" "cannot load the node topology" "the warning names the topology problem"
assert_contains "$IT_OUT" "rank=0 cpus=0-1" "the task runs unbound"
sed -i "s|\$| strict|" "$plugstack"
assert_rc 1 "an unreadable topology fails the task under strict" -- srun -n1 --gres=gpu:1 bash -c "$probe"
assert_contains "$IT_OUT" "cannot load the node topology" "the failure says why"
assert_not_contains "$IT_OUT" "rank=0" "the task did not run"
it_finish
