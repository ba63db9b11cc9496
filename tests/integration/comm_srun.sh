#!/bin/bash
# libsaker_comm across the local cluster's nodes under real srun: PMI2 rendezvous,
# the TCP-store rendezvous (plain srun), and a rank killed mid-allreduce.
source "$(dirname "$0")/lib.sh"
it_require_root
it_cluster_up --nodes 2 --cpus-per-node 4
selftest="$SAKER_BUILDDIR/tests/integration/comm_selftest"
# All "nodes" share this machine: peers reach each other on loopback, and the
# store's node name (saker1) only exists in slurm.conf.
export SAKER_COMM_ADDR=127.0.0.1 SAKER_STORE_HOST=127.0.0.1 SAKER_COMM_TIMEOUT=20

assert_rc 0 "PMI2 rendezvous, 4 ranks on 2 nodes" -- srun --mpi=pmi2 -p all -N2 -n4 "$selftest"
assert_eq 4 "$(grep -c 'comm-selftest ok' <<<"$IT_OUT")" "every PMI2 rank agrees"
assert_contains "$IT_OUT" "nodes 2 transport hierarchical" "two nodes with two ranks each: hierarchical"

assert_rc 0 "TCP store rendezvous (no PMI2), one rank per node" -- srun --mpi=none -p all -N2 -n2 "$selftest"
assert_eq 2 "$(grep -c 'comm-selftest ok' <<<"$IT_OUT")" "every TCP-store rank agrees"
assert_contains "$IT_OUT" "transport ring" "one rank per node: TCP ring"

# The job key (saker-comm(3), AUTHENTICATION): under PMI2 without one, rank 0 makes one and
# shares it through the KVS; plain srun without one fails closed, naming the fixes.
assert_rc 0 "PMI2 without SAKER_JOB_KEY: rank 0 shares a key over the KVS" -- \
  srun --mpi=pmi2 -p all -N2 -n2 env -u SAKER_JOB_KEY -u SAKER_JOB_KEY_FILE "$selftest"
assert_eq 2 "$(grep -c 'comm-selftest ok' <<<"$IT_OUT")" "every rank proved the shared key"
assert_rc 1 "plain srun without a job key fails closed" -- \
  srun --mpi=none -p all -N2 -n2 env -u SAKER_JOB_KEY -u SAKER_JOB_KEY_FILE "$selftest"
assert_contains "$IT_OUT" "no job key" "the error names the missing key"
assert_contains "$IT_OUT" "spank_saker.so" "and the fixes"

start=$(date +%s)
# Per-task output files: when srun force-terminates the step it may drop a task's last
# lines from its own forwarded stdio, and this test counts those lines.
SAKER_SELFTEST_KILL_RANK=1 srun --mpi=pmi2 -p all -N2 -n3 --kill-on-bad-exit=0 \
  -o "$IT_PREFIX/fault-%t.out" "$selftest" >"$IT_PREFIX/fault.out" 2>&1
elapsed=$(( $(date +%s) - start ))
fault=$(cat "$IT_PREFIX"/fault*.out)
assert_contains "$fault" "rank 1 (host" "survivors name the killed rank"
assert_eq 2 "$(grep -c 'comm-selftest error' <<<"$fault")" "both survivors fail instead of hanging"
assert_rc 0 "failure seen well within the 20 s timeout (took ${elapsed}s)" -- test "$elapsed" -lt 20
it_finish
