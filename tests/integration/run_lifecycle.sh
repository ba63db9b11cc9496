#!/usr/bin/env bash
# saker-run's lifecycle under real Slurm, as a new user meets it (issue 16, issue 12 item 5):
#  - under srun (already inside a step) it says what to do instead of hanging;
#  - a killed rank is reported by task, rank, node and signal, and a restart without
#    --ckpt-dir does not promise a checkpoint;
#  - an unrunnable program exits 127 and is never restarted;
#  - torchrun's variables reach every rank;
#  - --timeout sends SIGTERM and waits --grace, so the ranks can checkpoint;
#  - a rank whose heartbeat stops is stopped and counted as a failure;
#  - each attempt's ranks share a fresh SAKER_JOB_KEY, and a plain srun step gets one from
#    spank_saker.so, a new one per step (issue 28).
source "$(dirname "$0")/lib.sh"
it_require_root
it_cluster_up --nodes 2 --gpus-per-node 0 --partitions "all=saker[1-2]"
it_jobs_as_user
it_tmpdir
run=$SAKER_BUILDDIR/launcher/saker-run/saker-run

# batch NAME SCRIPT: run SCRIPT as a 2-node batch job, wait for it; output in $IT_TMP/NAME.out
batch() {
    local name=$1 script=$2
    printf '#!/bin/bash\n%s\n' "$script" >"$IT_TMP/$name.sh"
    it_job timeout 120 sbatch --wait -N2 --ntasks-per-node=1 -o "$IT_TMP/$name.out" "$IT_TMP/$name.sh" >/dev/null 2>&1
    cat "$IT_TMP/$name.out" 2>/dev/null
}

it_run it_job timeout 60 srun -N2 "$run" -- /bin/true
assert_eq 3 "$IT_RC" "saker-run under srun exits 3 at once instead of hanging (rc 124 would be the hang)"
assert_contains "$IT_OUT" "inside job step" "it says it is inside a job step"
assert_contains "$IT_OUT" "run saker-run once from the batch script" "and what to do instead"

out=$(batch killed "$run --max-restarts 1 -- /bin/sh -c 'if [ \$RANK = 1 ]; then kill -9 \$\$; fi; sleep 1'; echo rc=\$?")
assert_contains "$out" "task 1 (rank 1) on saker2 killed by SIGKILL" "a killed rank is reported by task, rank, node and signal"
assert_not_contains "$out" "srun exited with code" "not as srun's exit code"
assert_contains "$out" "saker-run has no --ckpt-dir: whether the program resumes depends on checkpoints of its own" "a restart without --ckpt-dir says saker-run cannot know whether it resumes (issue 31)"
assert_not_contains "$out" "from the beginning" "and does not claim it starts from the beginning"
assert_not_contains "$out" "from the latest checkpoint" "and promises no checkpoint"
assert_contains "$out" "rc=1" "all restarts spent: exit 1"

out=$(batch noexec "$run --max-restarts 3 -- /nonexistent; echo rc=\$?")
assert_contains "$out" "rc=127" "an unrunnable program exits 127"
assert_not_contains "$out" "attempt 1 starting" "and nothing is started, let alone restarted"

# Starts are counted in a file: a task that exits at once may lose its stdout when saker-run
# stops the step (seen in the fresh-root run: 0 'started' lines, but exit 78 as required).
# Rank 1 may be killed (kill-on-bad-exit) before its shell writes: count attempts, not ranks.
out=$(batch refused "$run --max-restarts 3 -- /bin/sh -c 'echo started \$SAKER_RUN_ATTEMPT >> $IT_TMP/refused.starts; exit 78'; echo rc=\$?")
assert_eq "started 1" "$(sort -u "$IT_TMP/refused.starts" 2>&1)" "a rank refusing its settings (exit 78) is started in attempt 1 only, never restarted"
assert_contains "$out" "rc=78" "and saker-run exits 78"

out=$(batch vars "$run --max-restarts 2 -- /bin/sh -c 'echo vars \$RANK \$GROUP_WORLD_SIZE \$ROLE_RANK \$ROLE_WORLD_SIZE \$TORCHELASTIC_RESTART_COUNT \$TORCHELASTIC_MAX_RESTARTS \$TORCHELASTIC_RUN_ID'")
job=$(sed -n 's/.*attempt 1 starting.*(job \([0-9]*\),.*/\1/p' <<<"$out" | head -n 1)
assert_contains "$out" "vars 0 2 0 2 0 2 $job" "rank 0 sees torchrun's variables (GROUP/ROLE sizes, restart count, run id $job)"
assert_contains "$out" "vars 1 2 1 2 0 2 $job" "rank 1 too"

# Issue 28: the ranks of each attempt share a fresh job key (SAKER_JOB_KEY), which srun
# carries to them and nothing prints; --transit reaches them as SAKER_COMM_TRANSIT.
cat >"$IT_TMP/keys-rank.sh" <<EOF
#!/bin/sh
echo "\$SAKER_JOB_KEY \$SAKER_COMM_TRANSIT" > $IT_TMP/key.\$SAKER_RUN_ATTEMPT.\$RANK
if [ "\$SAKER_RUN_ATTEMPT" = 1 ] && [ "\$RANK" = 1 ]; then
  while [ ! -s $IT_TMP/key.1.0 ]; do sleep 0.1; done
  exit 9
fi
EOF
chmod 0755 "$IT_TMP/keys-rank.sh"
out=$(batch keys "$run --max-restarts 1 --transit encrypt -- $IT_TMP/keys-rank.sh; echo rc=\$?")
assert_contains "$out" "rc=0" "attempt 1 fails, attempt 2 succeeds"
k10=$(cat "$IT_TMP/key.1.0" 2>&1) k11=$(cat "$IT_TMP/key.1.1" 2>&1)
k20=$(cat "$IT_TMP/key.2.0" 2>&1) k21=$(cat "$IT_TMP/key.2.1" 2>&1)
assert_eq 1 "$(grep -cxE '[0-9a-f]{64} encrypt' <<<"$k10")" "rank 0 (saker1) gets a 256-bit key and --transit=encrypt"
assert_eq "$k10" "$k11" "rank 1 (saker2) gets the same key in attempt 1"
assert_eq "$k20" "$k21" "both ranks share attempt 2's key"
assert_eq 1 "$(grep -cxE '[0-9a-f]{64} encrypt' <<<"$k20")" "attempt 2's key is a 256-bit key too"
if [[ $k20 != "$k10" ]]; then it_pass "attempt 2 has a new key"; else it_fail "attempt 2 reuses attempt 1's key"; fi
key=${k10%% *}
assert_not_contains "$out" "$key" "the key is not in saker-run's output"
assert_eq "" "$(grep -rlF "$key" "$IT_PREFIX" 2>/dev/null)" "nor in Slurm's logs and state"

# A plain srun step gets its own key from spank_saker.so (srun, local context), the next
# step another; a key the user gave is kept.
it_run srun -Q -p all -N2 -n2 printenv SAKER_JOB_KEY
step1=$(grep -xE '[0-9a-f]{64}' <<<"$IT_OUT" | sort -u)
assert_eq 2 "$(grep -cxE '[0-9a-f]{64}' <<<"$IT_OUT")" "both tasks of a plain srun -N2 step see a job key"
assert_eq 1 "$(grep -c . <<<"$step1")" "the same key on both nodes"
it_run srun -Q -p all -N2 -n2 printenv SAKER_JOB_KEY
step2=$(grep -xE '[0-9a-f]{64}' <<<"$IT_OUT" | sort -u)
assert_eq 1 "$(grep -c . <<<"$step2")" "the next step's tasks share a key too"
if [[ -n $step1 && $step2 != "$step1" ]]; then it_pass "and it is a new one"; else it_fail "two steps got the same key"; fi
it_run it_job env SAKER_JOB_KEY=given srun -Q -p all -N2 -n2 printenv SAKER_JOB_KEY
assert_eq "given given" "$(grep -x given <<<"$IT_OUT" | tr '\n' ' ' | sed 's/ $//')" "a key already set is kept"
it_run srun -Q -p all -N2 -n2 --export=PATH,SAKER_JOB_KEY printenv SAKER_JOB_KEY
assert_eq 2 "$(grep -cxE '[0-9a-f]{64}' <<<"$IT_OUT")" "srun --export=PATH,SAKER_JOB_KEY passes the plugin's key (made before srun reads --export)"

out=$(batch timeout "$run --max-restarts 0 --timeout 2 --grace 20 -- /bin/sh -c 'trap \"echo checkpointed \\\$RANK; exit 75\" TERM; while :; do sleep 0.2; done'; echo rc=\$?")
assert_contains "$out" "sending SIGTERM, then SIGKILL after 20 s" "--timeout sends SIGTERM first"
assert_contains "$out" "checkpointed 0" "rank 0 had its grace period to checkpoint"
assert_contains "$out" "checkpointed 1" "rank 1 too"
assert_contains "$out" "rc=1" "a timed-out attempt counts as a failure"

out=$(batch hang "$run --max-restarts 0 --hang-timeout 2 --grace 2 -- /bin/sh -c 'touch \"\$SAKER_HEARTBEAT_DIR/rank-\$RANK\"; sleep 60'; echo rc=\$?")
assert_contains "$out" "made no progress for" "a rank whose heartbeat stops is detected as hung"
assert_contains "$out" "rc=1" "and the attempt counts as a failure"
# SIGTERM to the batch shell (scancel -b): srun would SIGKILL its tasks on SIGTERM, so
# saker-run must hand SIGTERM to the ranks another way, leaving them --grace to checkpoint.
printf '#!/bin/bash\nexec %s --no-requeue --grace 20 -- /bin/sh -c %q\n' "$run" \
    'trap "echo checkpointed $RANK; exit 75" TERM; while :; do sleep 0.2; done' >"$IT_TMP/term.sh"
job=$(sbatch --parsable -N2 --ntasks-per-node=1 -o "$IT_TMP/term.out" "$IT_TMP/term.sh")
it_wait_for 30 "job $job's ranks started" grep -q "attempt 1 starting" "$IT_TMP/term.out"
sleep 1
scancel -b -s TERM "$job"
it_job_wait "$job" 60 >/dev/null
out=$(cat "$IT_TMP/term.out")
assert_contains "$out" "checkpointed 0" "SIGTERM to saker-run reaches rank 0 as SIGTERM, with time to checkpoint"
assert_contains "$out" "checkpointed 1" "and rank 1"
assert_not_contains "$out" "forcing job termination" "srun did not cancel the step"

# saker-train beats every step: steps slower than --hang-timeout count as a hang, and the
# SIGTERM that follows lets it commit an emergency checkpoint before the attempt fails.
train=$SAKER_BUILDDIR/launcher/saker-train/saker-train
it_job "$train" make-data --out "$IT_TMP/train.h5" --samples 1024 >/dev/null
out=$(batch trainhang "$run --max-restarts 0 --hang-timeout 2 --grace 20 --ckpt-dir $IT_TMP/ckpt -- $train --data $IT_TMP/train.h5 --steps 50 --step-sleep-ms 4000; echo rc=\$?")
assert_contains "$out" "made no progress for" "saker-train's heartbeat: a rank stuck longer than --hang-timeout is detected"
assert_contains "$out" "emergency checkpoint of step" "the SIGTERM before SIGKILL lets saker-train checkpoint"
assert_contains "$out" "rc=1" "and the attempt counts as a failure"
it_finish
