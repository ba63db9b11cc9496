#!/usr/bin/env bash
# spank_saker.so loads libyaml and libhwloc on first use, not with itself (issue 30,
# plugins/spank/lazy_libs.cpp): a step that needs neither loads neither, and where one is
# missing the check that needs it still fails closed. Driven through
# bench/spank_step_harness (slurmstepd's calls, one step per process); a library is made
# missing by bind-mounting an empty file over it in a mount namespace of this test's own.
source "$(dirname "$0")/lib.sh"
it_require_root
harness=$SAKER_BUILDDIR/bench/spank_step_harness
so=$SAKER_BUILDDIR/plugins/spank/.libs/spank_saker.so
[[ -x $harness ]] || { echo "spank_lazy_libs: $harness is not built (make check builds it)" >&2; exit 1; }
it_tmpdir
s=$IT_TMP
mkdir -p "$s/spool" "$s/etc"
cat >"$s/policy.yaml" <<'POLICY'
version: 1
unknown_datasets: deny
rules: {residency: enforce, access: enforce, gpu: enforce, locality: enforce}
classifications: [{name: restricted, requires_grant: true}]
zones: [{name: here, country: AE}]
partitions: [{name: all, zone: here, nodes: "saker[1-2]", default: true}]
datasets: [{name: records, classification: restricted, zones: [here]}]
grants: [{accounts: [bench], datasets: [records]}]
POLICY
echo "ProctrackType=proctrack/linuxproc" >"$s/etc/slurm.conf"
args=(state-dir="$s/state" policy="$s/policy.yaml")
export SLURMD_NODENAME=saker1 HARNESS_SPOOL=$s/spool HARNESS_CONF=$s/etc/slurm.conf HARNESS_JOB_ID=1
export HARNESS_DATASET=records

# The real file behind a soname, as the dynamic loader finds it.
lib_file() { readlink -f "$(ldconfig -p | awk -v n="$1" '$1 == n { print $NF; exit }')"; }
yaml=$(lib_file libyaml-0.so.2) hwloc=$(lib_file libhwloc.so.15)
[[ -f $yaml && -f $hwloc ]] || { echo "spank_lazy_libs: libyaml-0.so.2 or libhwloc.so.15 not found" >&2; exit 1; }
# without LIB CMD...: CMD with LIB unreadable as a library (an empty file in its place).
without() { local lib=$1; shift; unshare -m sh -c 'mount --bind /dev/null "$0" && exec "$@"' "$lib" "$@"; }

assert_rc 0 "the job prolog writes the node record (reads the policy: libyaml)" -- \
  env SLURM_JOB_ID=1 SLURM_JOB_UID=0 SLURM_JOB_USER=root SLURM_JOB_ACCOUNT=bench SPANK_SAKER_DATASETS=records \
  SLURM_JOB_PARTITION=all SLURM_NODELIST='saker[1-2]' "$harness" "$so" prolog "${args[@]}"
assert_contains "$(cat "$s/state/saker1/job-1")" "verdict=allow" "the prolog's verdict is in the record"

assert_not_contains "$(readelf -d "$so")" "libyaml" "the plugin does not link libyaml"
assert_not_contains "$(readelf -d "$so")" "libhwloc" "the plugin does not link libhwloc"

assert_rc 0 "a step on the job's dataset runs (its topology discovered and cached)" -- \
  env LD_DEBUG=libs "$harness" "$so" step "${args[@]}"
assert_contains "$IT_OUT" "libhwloc.so.15" "the first step loads libhwloc (no cache yet)"
[[ -f $s/spool/saker-topology.bin ]] && it_pass "the topology cache is written" || it_fail "the topology cache is written"
assert_rc 0 "the next step runs" -- env LD_DEBUG=libs "$harness" "$so" step "${args[@]}"
assert_not_contains "$IT_OUT" "libyaml" "a step the prolog's verdict covers loads no libyaml"
assert_not_contains "$IT_OUT" "libhwloc" "a step with the topology cached loads no libhwloc"

assert_rc 1 "a step that declares an unknown dataset is refused" -- \
  env HARNESS_DATASET=records,other "$harness" "$so" step "${args[@]}"
assert_contains "$IT_OUT" "dataset other is not in the site policy" "the refusal names the dataset"

# Fail closed: without libyaml the policy cannot be read, so a step that needs it is refused.
assert_rc 1 "without libyaml, a step that needs the policy is refused" -- \
  without "$yaml" env HARNESS_DATASET=records,other "$harness" "$so" step "${args[@]}"
assert_contains "$IT_OUT" "the data policy does not load on node saker1" "the refusal says the policy does not load"
assert_contains "$IT_OUT" "cannot load libyaml-0.so.2" "and which library is missing"
assert_contains "$IT_OUT" "install libyaml-0-2" "and the fix"
assert_rc 0 "without libyaml, a step the prolog's verdict covers still runs" -- \
  without "$yaml" "$harness" "$so" step "${args[@]}"

# Without libhwloc and no cache: the task runs unbound, or is refused with strict.
rm -f "$s/spool/saker-topology.bin"
assert_rc 0 "without libhwloc and no topology cache, the task runs unbound" -- \
  without "$hwloc" "$harness" "$so" step "${args[@]}"
assert_contains "$IT_OUT" "cannot load libhwloc.so.15" "the warning names the library"
assert_rc 1 "with strict, the task is refused" -- without "$hwloc" "$harness" "$so" step "${args[@]}" strict
assert_contains "$IT_OUT" "error: gpu-affinity: cannot load the node topology" "the refusal says why"
it_finish
