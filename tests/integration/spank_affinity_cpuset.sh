#!/usr/bin/env bash
# slurmd runs inside a restricted cpuset (a cgroup v1 cpuset holding CPU 0 only, as a
# site's systemd slice or a container would) and the plugin discovers the node's live
# topology from inside the step: the topology it writes and caches must still be the
# whole machine (both CPUs, with the allowed set recorded beside them), and the task is
# bound inside the allowed CPUs. Without hwloc's INCLUDE_DISALLOWED flag the topology
# would hold CPU 0 alone, and a cache written there would carry that error to every step.
#
# Skips (77) without a writable cgroup v1 cpuset hierarchy or with fewer than 2 CPUs.
source "$(dirname "$0")/lib.sh"
it_require_root

cg_root=/sys/fs/cgroup/cpuset
if [[ ! -w $cg_root/cgroup.procs || ! -f $cg_root/cpuset.cpus ]]; then
  echo "# SKIP: no writable cgroup v1 cpuset hierarchy at $cg_root (cgroup v2-only hosts need a delegated cpuset controller)"
  exit 77
fi
all_cpus=$(cat "$cg_root/cpuset.cpus")
if [[ $all_cpus == 0 ]]; then
  echo "# SKIP: one CPU only; a restricted cpuset needs at least two"
  exit 77
fi
saker_topo="$SAKER_BUILDDIR/plugins/affinity/saker-topo/saker-topo"
it_cluster_up --nodes 1 --gpus-per-node 0 --cpus-per-node 2 --no-job-submit
it_jobs_as_user
plugstack="$(dirname "$SLURM_CONF")/plugstack.conf"
topo="$IT_PREFIX/live-topology.xml"
sed -i "s|spank_saker.so.*|& topology=$topo|" "$plugstack"

# The cpuset: CPU 0 and every memory node; slurmd moves in, its steps inherit it.
cg="$cg_root/saker-it-$$"
mkdir "$cg"
echo 0 >"$cg/cpuset.cpus"
cat "$cg_root/cpuset.mems" >"$cg/cpuset.mems"
release_cpuset() {
  local pid
  if [[ -f $cg/cgroup.procs ]]; then
    while read -r pid; do echo "$pid" >"$cg_root/cgroup.procs" 2>/dev/null || true; done <"$cg/cgroup.procs"
  fi
  rmdir "$cg" 2>/dev/null || true
}
it_at_exit release_cpuset
slurmd_pid=$(cat "$IT_PREFIX"/run/slurmd-*.pid)
echo "$slurmd_pid" >"$cg/cgroup.procs"
assert_eq "0" "$(awk '/^Cpus_allowed_list/ { print $2 }' "/proc/$slurmd_pid/status")" "slurmd runs on CPU 0 only"

probe='echo "rank=$SLURM_LOCALID cpus=$(awk "/^Cpus_allowed_list/ {print \$2}" /proc/self/status) cpuset=$(cat /proc/self/cpuset)"'
assert_rc 0 "a step runs inside the restricted cpuset" -- srun -n1 bash -c "$probe"
assert_contains "$IT_OUT" "rank=0 cpus=0 cpuset=/saker-it-$$" "the task is in the cpuset and bound to its CPU"
assert_rc 0 "the live topology was written from inside the step" -- test -s "$topo"

# The file holds the whole machine; its allowed set is the cpuset's.
show=$("$saker_topo" show --topology "$topo")
all_list=$("$saker_topo" plan --topology "$topo" --ntasks-per-node 1 --cpuset "$all_cpus" --format env | sed 's/.* cpus=\([^ ]*\).*/\1/')
assert_eq "$all_cpus" "$all_list" "the written topology has every CPU of the machine ($all_cpus), not only the allowed one"
assert_contains "$show" "allowed CPUs (the exporting process's cpuset): 0" "and records that only CPU 0 was allowed"
# What hwloc shows without INCLUDE_DISALLOWED (the old loader): CPU 0 alone.
assert_eq "1" "$(hwloc-calc --input "$topo" --number-of pu all 2>/dev/null)" \
  "hwloc without INCLUDE_DISALLOWED sees one PU only (the error the flag avoids)"

# The compact cache in the node's spool is the whole machine too: the next step reads it.
node=$(basename "$IT_PREFIX"/run/slurmd-*.pid .pid); node=${node#slurmd-}
assert_rc 0 "the compact cache was written" -- test -s "$IT_PREFIX/nodes/$node/spool/saker-topology.bin"
stamp=$(stat -c %Y.%i "$IT_PREFIX/nodes/$node/spool/saker-topology.bin")
assert_rc 0 "a second step runs" -- srun -n1 --gpu-affinity=explain bash -c "$probe"
assert_contains "$IT_OUT" "rank=0 cpus=0 " "it is bound inside the cpuset"
assert_contains "$IT_OUT" "allowed CPUs 0" "explain shows the step's allowed CPUs"
assert_eq "$stamp" "$(stat -c %Y.%i "$IT_PREFIX/nodes/$node/spool/saker-topology.bin")" "the cache was read, not rewritten"
it_finish
