#!/usr/bin/env bash
# cluster_basics: the local Slurm cluster of scripts/saker-cluster works as a real cluster.
# Needs root (otherwise SKIP, exit 77).  Passes whether or not the Saker plugins are built.
set -uo pipefail

# shellcheck source=tests/integration/lib.sh
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"

it_require_root
it_tmpdir

it_cluster_up --nodes 3 --gpus-per-node 4
it_jobs_as_user
prefix=$IT_PREFIX

# --- partitions -----------------------------------------------------------------------------
parts=$(sinfo -h -o '%P' | sort | tr '\n' ' ')
assert_contains "$parts" "zone-a*" "partition zone-a exists and is the default"
assert_contains "$parts" "zone-b" "partition zone-b exists"
assert_contains "$parts" "all" "partition all exists"
assert_eq "3" "$(sinfo -h -N -p all -o '%N %T' | grep -c ' idle$')" "3 nodes idle in partition all"

# --- srun across the 3 nodes ------------------------------------------------------------------
assert_rc 0 "srun -N3 -n3 hostname exits 0" -- srun -Q -p all -N3 -n3 hostname
# Only the tasks' lines count: plugins may add warnings on stderr.
assert_eq 3 "$(grep -cxF "$(hostname)" <<<"$IT_OUT")" "srun -N3 -n3 hostname ran 3 tasks"
assert_rc 0 "srun -N3 -n3 printenv SLURMD_NODENAME" -- srun -Q -p all -N3 -n3 printenv SLURMD_NODENAME
assert_eq "saker1 saker2 saker3" "$(grep -x 'saker[0-9]*' <<<"$IT_OUT" | sort | tr '\n' ' ' | sed 's/ $//')" \
    "the 3 tasks ran on the 3 distinct nodes saker1..3"

# Fictional CPUs: 4 per node although the machine may have fewer.
assert_rc 0 "srun -N1 -n4 (4 fictional CPUs on one node)" -- srun -p all -N1 -n4 true

# --- fake GPUs -------------------------------------------------------------------------------
assert_rc 0 "srun --gres=gpu:2 env" -- srun -Q --gres=gpu:2 env
assert_contains "$IT_OUT" "CUDA_VISIBLE_DEVICES=0,1" "--gres=gpu:2 gives CUDA_VISIBLE_DEVICES=0,1"

# shellcheck disable=SC2016  # expanded by the task, not here
assert_rc 0 "srun --gpus-per-task=1 -n2 -N1" -- \
    srun -Q --gpus-per-task=1 -n2 -N1 bash -c 'echo "$SLURM_PROCID:${CUDA_VISIBLE_DEVICES:-none}"'
tasks=$(grep -xE '[0-9]+:[0-9,]+|[0-9]+:none' <<<"$IT_OUT" | sort)
gpus=$(cut -d: -f2 <<<"$tasks" | grep -v '^none$' | sort -u | wc -l)
assert_eq 2 "$gpus" "--gpus-per-task=1: each of the 2 tasks has its own GPU ($(tr '\n' ' ' <<<"$tasks"))"

# --- batch job -------------------------------------------------------------------------------
# shellcheck disable=SC2016  # expanded by the job, not here
assert_rc 0 "sbatch --wrap" -- sbatch --parsable -o "$IT_TMP/batch-%j.out" \
    --wrap 'echo "saker-batch-ok on $SLURMD_NODENAME"'
job=$(grep -xE '[0-9]+(;.*)?' <<<"$IT_OUT" | tail -n 1)   # --parsable: "ID" or "ID;cluster"
job=${job%%;*}
state=$(it_job_wait "$job" 60)
assert_eq COMPLETED "$state" "batch job $job completed"
assert_contains "$(cat "$IT_TMP/batch-$job.out" 2>&1)" "saker-batch-ok on saker" "batch output file has the expected text"

# --- status ----------------------------------------------------------------------------------
assert_rc 0 "saker-cluster status exits 0 on a running cluster" -- "$SAKER_CLUSTER" status --prefix "$prefix"
assert_contains "$IT_OUT" "slurmd(saker3)" "status lists every slurmd"

# --- down: nothing of the cluster is left --------------------------------------------------------
# A job still running at 'down' must not survive it.
assert_rc 0 "a long batch job is running before down" -- sbatch --parsable -p all -N2 -o "$IT_TMP/long-%j.out" --wrap 'srun sleep 600'
long_job=$(grep -xE '[0-9]+(;.*)?' <<<"$IT_OUT" | tail -n 1)
long_job=${long_job%%;*}
it_wait_for 20 "the long job is RUNNING" bash -c "squeue -h -j '$long_job' -o %T | grep -q RUNNING"

procs_referring_to() {   # PIDs whose command line mentions $1/
    local f c
    for f in /proc/[0-9]*/cmdline; do
        c=$(tr '\0' ' ' 2>/dev/null <"$f") || continue
        [[ $c == *"$1/"* ]] && { f=${f#/proc/}; printf '%s ' "${f%/cmdline}"; }
    done
    return 0
}
assert_rc 0 "saker-cluster down exits 0" -- "$SAKER_CLUSTER" down --prefix "$prefix"
IT_PREFIX=""   # already down: nothing left for the exit trap
unset SLURM_CONF
assert_eq "" "$(procs_referring_to "$prefix")" "no process refers to $prefix after down"
assert_eq "" "$(grep -lzF "SLURM_CONF=$prefix/etc/slurm.conf" /proc/[0-9]*/environ 2>/dev/null | grep -v "^/proc/$$/" | grep -v "^/proc/$BASHPID/" | tr '\n' ' ')" \
    "no process runs with this cluster's SLURM_CONF after down"
if [[ -e $prefix ]]; then it_fail "prefix $prefix removed by down"; else it_pass "prefix $prefix removed by down"; fi
assert_rc 0 "down again on a cluster that is gone is a no-op" -- "$SAKER_CLUSTER" down --prefix "$prefix"
assert_rc 3 "status of a cluster that is gone exits 3" -- "$SAKER_CLUSTER" status --prefix "$prefix"

# --- up twice in a row (same prefix) is safe ---------------------------------------------------
it_cluster_up --nodes 2 --gpus-per-node 0
it_jobs_as_user
prefix=$IT_PREFIX
assert_rc 0 "up again on the running cluster's prefix" -- \
    "$SAKER_CLUSTER" up --prefix "$prefix" --port-base "$IT_PORT_BASE" --nodes 2 --gpus-per-node 0 \
    --build-dir "${SAKER_BUILDDIR:-$SAKER_SRCDIR}"
assert_contains "$IT_OUT" "taking it down first" "the second up says it takes the old cluster down"
assert_rc 0 "srun on the re-created cluster" -- srun -Q -p all -N2 -n2 printenv SLURMD_NODENAME
assert_eq "saker1 saker2" "$(grep -x 'saker[0-9]*' <<<"$IT_OUT" | sort | tr '\n' ' ' | sed 's/ $//')" "both nodes of the re-created cluster run tasks"
assert_rc 0 "status after the second up" -- "$SAKER_CLUSTER" status --prefix "$prefix"
# Exactly one slurmctld for this prefix (the old one is gone).
n=$(for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' 2>/dev/null <"$f"; echo; done | grep -c "^slurmctld .*$prefix/etc/slurm.conf")
assert_eq 1 "$n" "one slurmctld runs for the prefix after up twice"

it_finish
