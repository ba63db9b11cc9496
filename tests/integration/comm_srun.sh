#!/bin/bash
# libsaker_comm across the local cluster's nodes under real srun: PMI2 rendezvous,
# the TCP-store rendezvous (plain srun), and a rank killed mid-allreduce.
source "$(dirname "$0")/lib.sh"
it_require_root
it_cluster_up --nodes 2 --cpus-per-node 4
IT_USER=saker-carol   # a user of its own: saker-mallory attacks every listener of hers below
it_jobs_as_user
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

# Per-task output files: when srun force-terminates the step it may drop a task's last
# lines from its own forwarded stdio, and this test counts those lines.
SAKER_SELFTEST_KILL_RANK=1 srun --mpi=pmi2 -p all -N2 -n3 --kill-on-bad-exit=0 \
  -o "$IT_PREFIX/fault-%t.out" "$selftest" >"$IT_PREFIX/fault.out" 2>&1
fault=$(cat "$IT_PREFIX"/fault*.out)
assert_contains "$fault" "rank 1 (host" "survivors name the killed rank"
assert_eq 2 "$(grep -c 'comm-selftest error' <<<"$fault")" "both survivors fail instead of hanging"
# Seen as the peer's loss, not by waiting out the timeout (judged by what the survivors
# say, not by how long it took: the machine may be loaded).
assert_rc 1 "the survivors saw the loss itself, not the timeout" -- grep -q "did not answer within" "$IT_PREFIX"/fault*.out

# Another user against plain srun's store, whose port anyone can compute from the job and
# step ids that squeue shows (launcher/comm/slurm_store_port.hpp): saker-mallory squats it
# before the step starts, or races to read and poison it as the ranks meet
# (tests/integration/zt_attacker.py; zero_trust_attacks.sh has the other attacks).
if ((IT_AS_USER)) && [[ -r $SAKER_SRCDIR/tests/integration/zt_attacker.py ]]; then
  mallory=saker-mallory
  id -u "$mallory" >/dev/null 2>&1 || useradd -M -s /usr/sbin/nologin "$mallory"
  mdir=$IT_TMP/mallory && mkdir -p "$mdir" && chown "$mallory:" "$mdir" && chmod 0700 "$mdir"
  store_port() { echo $((20000 + ($1 % 12000 * 64 + $2 % 12000) % 12000)); }
  # srun_attack NAME SUBCOMMAND [ARGS...]: a held 2-node job of the test user's whose step
  # allreduces (checked bitwise) until $IT_PREFIX/NAME.stop exists; mallory's attack on its
  # store port starts, then the job is released. Sets JOB_STATE, JOB_OUT, ATK_OUT.
  srun_attack() {
    local name=$1 sub=$2 job port atk deadline
    shift 2
    job=$(sbatch --parsable --hold -p all -N2 -n2 -o "$IT_PREFIX/$name.out" \
      --export=ALL,SAKER_SELFTEST_UNTIL="$IT_PREFIX/$name.stop" --wrap "srun --mpi=none $selftest")
    port=$(store_port "$job" 0)
    SRUN_PORT=$port
    setpriv --reuid="$mallory" --regid="$mallory" --init-groups -- env -i PATH=/usr/bin:/bin /usr/bin/python3 \
      "$SAKER_SRCDIR/tests/integration/zt_attacker.py" "$sub" --uid "$(id -u "$IT_USER")" --port "$port" \
      --stop "$mdir/$name.atk-stop" --out "$mdir/$name" --deadline 90 "$@" >"$IT_PREFIX/$name.atk" 2>&1 &
    atk=$!
    deadline=$((SECONDS + 10))
    while [[ $sub == squat && ! -e $mdir/$name.ready ]] && ((SECONDS < deadline)); do sleep 0.1; done
    scontrol release "$job"
    deadline=$((SECONDS + 60))
    while [[ ! -e $mdir/$name.done ]] && ((SECONDS < deadline)) && [[ $(it_job_state "$job") != COMPLETED && $(it_job_state "$job") != FAILED ]]; do sleep 0.2; done
    touch "$IT_PREFIX/$name.stop"
    JOB_STATE=$(it_job_wait "$job" 120)
    touch "$mdir/$name.atk-stop"
    wait "$atk"
    JOB_OUT=$(cat "$IT_PREFIX/$name.out")
    ATK_OUT=$(cat "$IT_PREFIX/$name.atk")
    it_log "$name: job $job, store port $port, $JOB_STATE; attacker: $(grep -c '^FACT' <<<"$ATK_OUT") fact(s)"
  }
  srun_attack srun-squat squat
  assert_not_contains "$ATK_OUT" "FACT squat-registered" "plain srun, store port squatted first: no rank registers with the squatter"
  if [[ $JOB_STATE == COMPLETED ]]; then
    assert_eq 2 "$(grep -c 'comm-selftest zt ok' <<<"$JOB_OUT")" "plain srun, store port squatted first: the job ran unaffected"
  else
    assert_contains "$JOB_OUT" ":$SRUN_PORT" "plain srun, store port squatted first: the job fails naming the port $SRUN_PORT"
    assert_contains "$JOB_OUT" "SAKER_STORE_PORT" "... and the fix (SAKER_STORE_PORT)"
  fi
  srun_attack srun-read store-read
  assert_eq COMPLETED "$JOB_STATE" "plain srun, store read raced: the job completes"
  assert_eq 2 "$(grep -c 'comm-selftest zt ok' <<<"$JOB_OUT")" "... every rank checked every result bitwise"
  assert_contains "$ATK_OUT" "INFO connected to 127.0.0.1:$SRUN_PORT" "... mallory reached its store"
  assert_not_contains "$ATK_OUT" "FACT store-read" "... and read nothing from it"
  srun_attack srun-poison store-poison
  assert_eq COMPLETED "$JOB_STATE" "plain srun, store poisoned: the job completes"
  assert_eq 2 "$(grep -c 'comm-selftest zt ok' <<<"$JOB_OUT")" "... every rank checked every result bitwise"
  assert_contains "$ATK_OUT" "INFO connected to 127.0.0.1:$SRUN_PORT" "... mallory reached its store"
  assert_not_contains "$ATK_OUT" "FACT poison-connected" "... and no rank connected to her address"
fi
it_finish
