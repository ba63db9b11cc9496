#!/usr/bin/env bash
# OpenMP thread binding under spank_saker.so is opt-in (--omp-bind, plugstack omp-bind=).
#
# With OMP_PLACES set, GNU OpenMP (libgomp, which PyTorch loads on `import torch`) binds
# the task's initial thread to the first place at start-up, and every thread or process
# started from it later inherits that one core. So by default a task gets OMP_NUM_THREADS
# only and a real PyTorch task keeps its whole CPU mask; --omp-bind=close|spread pins as
# asked; and the task's own OMP_* values always win over the plan's.
#
# The node's topology is the 2-CPU fixture whose PUs are this machine's CPUs 0 and 1 (two
# cores), so the binding really happens. Skips (77) without root, fewer than 2 CPUs, or
# neither PyTorch nor an OpenMP C compiler.
source "$(dirname "$0")/lib.sh"
it_require_root

if (($(nproc --all) < 2)); then
  echo "# SKIP: this machine has one CPU; the checks need a task of 2 CPUs"
  exit 77
fi
it_tmpdir
have_torch=0
/usr/bin/python3 -c 'import torch' >/dev/null 2>&1 && have_torch=1
# A tiny OpenMP program: the initial thread's CPUs after a parallel region, and each of
# its two threads' CPUs inside it.
have_omp=0
cat >"$IT_TMP/omp_probe.c" <<'EOF'
#define _GNU_SOURCE
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
static void cpus(char* out) {
  cpu_set_t set;
  out[0] = 0;
  if (sched_getaffinity(0, sizeof set, &set) != 0) { strcpy(out, "?"); return; }
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) sprintf(out + strlen(out), "%s%d", out[0] ? "," : "", c);
}
int main(void) {
  char inner[2][256] = {"-", "-"}, initial[256];
#pragma omp parallel num_threads(2)
  cpus(inner[omp_get_thread_num() & 1]);
  cpus(initial);
  printf("omp initial=%s thread0=%s thread1=%s\n", initial, inner[0], inner[1]);
  return 0;
}
EOF
gcc -fopenmp -O1 -o "$IT_TMP/omp_probe" "$IT_TMP/omp_probe.c" >/dev/null 2>&1 && have_omp=1
if ((have_torch == 0 && have_omp == 0)); then
  echo "# SKIP: neither PyTorch (/usr/bin/python3 -c 'import torch') nor gcc -fopenmp is available"
  exit 77
fi

topo="$SAKER_SRCDIR/tests/data/topo-itest-2cpu-4gpu.xml"
saker_topo="$SAKER_BUILDDIR/plugins/affinity/saker-topo/saker-topo"
it_cluster_up --nodes 1 --gpus-per-node 0 --cpus-per-node 2 --no-job-submit --spank-args "topology=$topo"
it_jobs_as_user
plugstack="$(dirname "$SLURM_CONF")/plugstack.conf"

# The torch probe: the CPUs of the task's initial thread after `import torch`, of a
# process it starts then (as a DataLoader worker would be), and the OMP_* it sees.
cat >"$IT_TMP/torch_probe.py" <<'EOF'
import os, subprocess, torch
def cpus(status):
    return next(l.split()[1] for l in status.splitlines() if l.startswith("Cpus_allowed_list"))
child = subprocess.run(["cat", "/proc/self/status"], capture_output=True, text=True).stdout
print("torch cpus=%s child=%s OMP_NUM_THREADS=%s OMP_PLACES=%s OMP_PROC_BIND=%s" % (
    cpus(open("/proc/self/status").read()), cpus(child),
    *(os.environ.get(k, "<unset>") for k in ("OMP_NUM_THREADS", "OMP_PLACES", "OMP_PROC_BIND"))))
EOF
torch_probe=(/usr/bin/python3 "$IT_TMP/torch_probe.py")
step=(srun -n1 -c2)

# The task's whole CPU mask, as the plan has it (and the plugin sets it).
mask=$("$saker_topo" plan --topology "$topo" --ntasks-per-node 1 --cpuset 0-1 --format env | sed 's/.* cpus=\([^ ]*\).*/\1/')
assert_eq "0-1" "$mask" "the plan gives a 2-CPU task both CPUs"
assert_not_contains "$("$saker_topo" plan --topology "$topo" --ntasks-per-node 1 --cpuset 0-1 --format env)" "OMP_PROC_BIND" \
  "saker-topo plan shows no OMP_PROC_BIND by default, as the plugin applies"

# Default: OMP_NUM_THREADS only; import torch leaves the task on all its CPUs.
if ((have_torch)); then
  assert_rc 0 "default: a torch task runs" -- "${step[@]}" "${torch_probe[@]}"
  assert_contains "$IT_OUT" "torch cpus=$mask child=$mask OMP_NUM_THREADS=2 OMP_PLACES=<unset> OMP_PROC_BIND=<unset>" \
    "default: after import torch the task and what it starts keep the task's whole mask ($mask)"
fi
if ((have_omp)); then
  assert_rc 0 "default: an OpenMP task runs" -- "${step[@]}" "$IT_TMP/omp_probe"
  assert_contains "$IT_OUT" "omp initial=0,1 thread0=0,1 thread1=0,1" "default: OpenMP threads float over the task's CPUs"
fi

# --omp-bind=close: one place per core, the initial thread on the first.
if ((have_torch)); then
  assert_rc 0 "--omp-bind=close: a torch task runs" -- "${step[@]}" --omp-bind=close "${torch_probe[@]}"
  assert_contains "$IT_OUT" "torch cpus=0 child=0 OMP_NUM_THREADS=2 OMP_PLACES={0},{1} OMP_PROC_BIND=close" \
    "--omp-bind=close: libgomp pins the initial thread (and what it starts) to the first place"
fi
if ((have_omp)); then
  assert_rc 0 "--omp-bind=close: an OpenMP task runs" -- "${step[@]}" --omp-bind=close "$IT_TMP/omp_probe"
  assert_contains "$IT_OUT" "omp initial=0 thread0=0 thread1=1" "--omp-bind=close: one OpenMP thread per core"
  assert_rc 0 "--omp-bind=spread: an OpenMP task runs" -- "${step[@]}" --omp-bind=spread bash -c \
    'echo "OMP_PROC_BIND=$OMP_PROC_BIND OMP_PLACES=$OMP_PLACES"; exec '"$IT_TMP/omp_probe"
  assert_contains "$IT_OUT" "OMP_PROC_BIND=spread OMP_PLACES={0},{1}" "--omp-bind=spread exports the spread policy"
  assert_contains "$IT_OUT" "omp initial=0 thread0=0 thread1=1" "--omp-bind=spread: one OpenMP thread per core"
fi

# The task's own values win, for each of the three variables.
probe_env='echo "env OMP_NUM_THREADS=$OMP_NUM_THREADS OMP_PLACES=$OMP_PLACES OMP_PROC_BIND=$OMP_PROC_BIND"'
if ((have_torch)); then
  assert_rc 0 "the user's OMP_PROC_BIND=false with --omp-bind=close: a torch task runs" -- \
    env OMP_PROC_BIND=false "${step[@]}" --omp-bind=close "${torch_probe[@]}"
  assert_contains "$IT_OUT" "torch cpus=$mask child=$mask OMP_NUM_THREADS=2 OMP_PLACES={0},{1} OMP_PROC_BIND=false" \
    "the user's OMP_PROC_BIND=false wins over --omp-bind=close: the torch task keeps its whole mask"
fi
assert_rc 0 "the user's OMP_NUM_THREADS and OMP_PLACES with --omp-bind=close" -- \
  env OMP_NUM_THREADS=3 'OMP_PLACES={1}' "${step[@]}" --omp-bind=close bash -c "$probe_env"
assert_contains "$IT_OUT" "env OMP_NUM_THREADS=3 OMP_PLACES={1} OMP_PROC_BIND=close" \
  "the user's OMP_NUM_THREADS and OMP_PLACES win; the plan adds only OMP_PROC_BIND"
assert_rc 0 "explain with the user's OMP_PROC_BIND" -- \
  env OMP_PROC_BIND=false "${step[@]}" --omp-bind=close --gpu-affinity=explain true
assert_contains "$IT_OUT" "saker: rank 0 bound to CPUs 0-1, NUMA node 0, keeps its own OMP_PROC_BIND=false" \
  "explain says which of the task's own values it kept"
assert_contains "$IT_OUT" "saker: OpenMP threads pinned: OMP_PROC_BIND=close" "explain says OpenMP threads are pinned"

# srun inside a bound task (as in `srun --pty bash`, then srun in that shell): the inner
# step inherits the outer plan's OMP_*, recorded in SAKER_PLAN_OMP. Those are the outer
# plan's, not the user's: the inner plan replaces them (its own core count) and drops the
# pinning it does not ask for; a value the user changed in between stays theirs. Two inner
# tasks of one core each: their plan's OMP_NUM_THREADS (1) differs from the outer one's (2).
inner='srun --overlap -n2 -c1 --omp-bind=none bash -c '\''echo "inner OMP_NUM_THREADS=$OMP_NUM_THREADS OMP_PLACES=${OMP_PLACES-<unset>} OMP_PROC_BIND=${OMP_PROC_BIND-<unset>}"'\'
assert_rc 0 "srun inside a step bound with --omp-bind=close" -- "${step[@]}" --omp-bind=close bash -c "$inner"
assert_contains "$IT_OUT" "inner OMP_NUM_THREADS=1 OMP_PLACES=<unset> OMP_PROC_BIND=<unset>" \
  "the inner step's plan replaces the outer plan's inherited OMP_* (1 core, no pinning)"
assert_rc 0 "srun inside a step, the user's OMP_NUM_THREADS set in between" -- \
  "${step[@]}" --omp-bind=close bash -c "export OMP_NUM_THREADS=5; $inner"
assert_contains "$IT_OUT" "inner OMP_NUM_THREADS=5 OMP_PLACES=<unset> OMP_PROC_BIND=<unset>" \
  "a value the user set in the outer task stays theirs in the inner step"

# A bad --omp-bind is refused by srun itself, naming the option, the value and the choices.
assert_rc 255 "a bad --omp-bind is refused" -- "${step[@]}" --omp-bind=closer true
assert_contains "$IT_OUT" "--omp-bind: unknown value 'closer'" "the refusal names the option and the value"
assert_contains "$IT_OUT" "none, close and spread" "the refusal lists the accepted values"

# The site's default: plugstack omp-bind=close; a job's --omp-bind=none overrides it.
sed -i "s|spank_saker.so.*|& omp-bind=close|" "$plugstack"
assert_rc 0 "plugstack omp-bind=close: a step runs" -- "${step[@]}" bash -c "$probe_env"
assert_contains "$IT_OUT" "env OMP_NUM_THREADS=2 OMP_PLACES={0},{1} OMP_PROC_BIND=close" "plugstack omp-bind=close is the default"
if ((have_torch)); then
  assert_rc 0 "--omp-bind=none over plugstack omp-bind=close: a torch task runs" -- \
    "${step[@]}" --omp-bind=none "${torch_probe[@]}"
  assert_contains "$IT_OUT" "torch cpus=$mask child=$mask OMP_NUM_THREADS=2 OMP_PLACES=<unset> OMP_PROC_BIND=<unset>" \
    "the job's --omp-bind=none overrides the site's omp-bind=close"
fi

# A bad plugstack value: the plugin refuses to load with the reason (Slurm fails the
# command, as for any bad plugstack argument); the daemons stay up.
sed -i "s| omp-bind=close| omp-bind=pinned|" "$plugstack"
assert_rc 1 "plugstack omp-bind=pinned: srun fails" -- "${step[@]}" true
assert_contains "$IT_OUT" "plugstack.conf: omp-bind: unknown value 'pinned'" "the error names the key and the value"
assert_contains "$IT_OUT" "none, close and spread" "the error lists the accepted values"
sed -i "s| omp-bind=pinned||" "$plugstack"
slurmd_pid=$(cat "$IT_PREFIX"/run/slurmd-*.pid)
assert_rc 0 "slurmd is still running" -- kill -0 "$slurmd_pid"
assert_rc 0 "with plugstack fixed, a step runs again" -- "${step[@]}" bash -c "$probe_env"
assert_contains "$IT_OUT" "env OMP_NUM_THREADS=2 OMP_PLACES= OMP_PROC_BIND=" "and gets the default again"
it_finish
