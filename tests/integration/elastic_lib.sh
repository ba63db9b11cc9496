# shellcheck shell=bash
# Helpers of the elastic_*.sh integration tests (issue 32), sourced after lib.sh and
# train_lib.sh: a 4-node cluster that allows job expansion, an elastic saker-train job,
# losing a node and bringing it back.
#
# The jobs, the uninterrupted reference run and the data are the test user's (issue 28: a
# real site is multi-tenant; saker-run then shrinks, releases and grows its own job as that
# user). Root stays only for what a crash, a lost machine, Slurm or the operator does:
# killing a node's slurmd with its processes, starting slurmd again.

# Steps long enough for two losses, two shrinks, a grow and a loss during it to land
# mid-run; a checkpoint every 25. The job's pace is set by the sleep per step, not by the
# machine, while the test's own commands (squeue, /proc scans) slow down under load: at
# 60 ms a step (36 s in all) a loaded CI run reached its second kill only as the job
# ended (squeue can stall while slurmctld times out on the dead node). At 200 ms the run
# lasts 2 minutes; the test waits for each event, not for a time.
ELASTIC_MODEL_ARGS="--steps 600 --layers 32,32 --batch 64 --ckpt-every 25 --log-every 25 --seed 7"
ELASTIC_STEP_SLEEP_MS=${ELASTIC_STEP_SLEEP_MS:-200}

# elastic_cluster_up: 4 CPU nodes; permit_job_expansion is what lets a node that answers
# again rejoin a running job (saker-run(1), ELASTIC RUNS).
elastic_cluster_up() {
  it_cluster_up --nodes 4 --gpus-per-node 0 --cpus-per-node 4 --no-job-submit \
    --slurm-conf-extra "SchedulerParameters=batch_sched_delay=0,sched_interval=2,bf_interval=2,sched_min_interval=0,permit_job_expansion"
  it_jobs_as_user
  train_setup
}

# elastic_logical_args: --logical-ranks 4 when this saker-train has it (the ranks then
# compute 4 logical workers whatever the world size, so a resized run ends bitwise where
# the uninterrupted one does); empty otherwise.
elastic_logical_args() {
  if "$SAKER_TRAIN_BIN" --help 2>&1 | grep -q -- '--logical-ranks'; then echo "--logical-ranks 4"; fi
}

# elastic_submit NODES SAKER_RUN_ARGS...: an sbatch job of NODES nodes, one rank each,
# running saker-train through saker-run with the given saker-run options; echoes its id.
# Output in $IT_PREFIX/elastic-<job>.out, checkpoints in $IT_PREFIX/ckpt-<n>. sbatch is
# lib.sh's: the test user's after it_jobs_as_user, so the checkpoints are the user's too.
elastic_submit() {
  local nodes=$1
  shift
  local ckpt
  ckpt=$(mktemp -d "$IT_PREFIX/ckpt-XXXXXX")
  rmdir "$ckpt"
  # --no-kill: if saker-run cannot release a lost node (22.05 without slurmdbd refuses a
  # second update of a job resized before), slurmctld's DOWN verdict removes the node from
  # the job instead of requeueing it.
  sbatch --parsable -p all -N "$nodes" --ntasks-per-node=1 --requeue --no-kill --open-mode=append -D "$IT_PREFIX" \
    -o "$IT_PREFIX/elastic-%j.out" \
    --wrap "$SAKER_RUN_BIN $* --grace 20 --ckpt-dir $ckpt -- $SAKER_TRAIN_BIN --data $TRAIN_DATA \
$ELASTIC_MODEL_ARGS $(elastic_logical_args) --step-sleep-ms $ELASTIC_STEP_SLEEP_MS"
}

# elastic_kill_node JOB RANK: SIGKILLs the slurmd of the node that runs RANK of JOB, with the
# rank and its slurmstepd (a crashed machine takes them along); echoes the node's name.
# Root: a lost machine takes root's daemons along with the user's rank.
elastic_kill_node() {
  local job=$1 rank=$2 pid="" stepd="" node="" slurmd deadline=$((SECONDS + 30))
  # The running attempt's rank (elastic_rank_pid); a process that exits under us (the
  # stopped attempt's, or this one's as it fails) is looked for again.
  while ((SECONDS < deadline)); do
    if pid=$(elastic_rank_pid "$job" "$rank"); then
      node=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | sed -n 's/^SLURMD_NODENAME=//p')
      stepd=$(ps -o ppid= -p "$pid" | tr -d ' ')
      [[ -n $node && -n $stepd && -r $IT_PREFIX/run/slurmd-$node.pid ]] && break
    fi
    node=""
    sleep 0.2
  done
  [[ -n $node ]] || { echo "no running rank $rank of job $job within 30 s" >&2; return 1; }
  slurmd=$(cat "$IT_PREFIX/run/slurmd-$node.pid")
  kill -KILL "$slurmd" "$stepd" "$pid"
  echo "$node"
}

# elastic_rank_pid JOB RANK: the pid of RANK of JOB's running attempt: of the saker-train
# processes (or ELASTIC_RANK_COMM's: python3 for a saker.torch script) of that rank on this
# cluster (rank_pid, train_lib.sh), the one started last. A
# stopped attempt's rank can still be exiting when the next attempt runs (after a shrink
# the test kills again at once); killing it would leave the running attempt untouched.
elastic_rank_pid() {
  local job=$1 rank=$2 pid env best="" start latest=-1
  for pid in $(pgrep -x "${ELASTIC_RANK_COMM:-saker-train}"); do
    env=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null) || continue
    grep -qx "SLURM_CONF=$SLURM_CONF" <<<"$env" && grep -qx "SLURM_JOB_ID=$job" <<<"$env" &&
      grep -qx "RANK=$rank" <<<"$env" || continue
    # Field 22 of /proc/PID/stat: its start time in clock ticks since boot.
    start=$(awk '{ print $22 }' "/proc/$pid/stat" 2>/dev/null) || continue
    if [[ -n $start ]] && ((start > latest)); then latest=$start best=$pid; fi
  done
  [[ -n $best ]] && echo "$best"
}

# elastic_revive_node NODE: starts NODE's slurmd again, as saker-cluster does (root: the
# operator brings the machine back).
elastic_revive_node() {
  env -i PATH="${SAKER_CLUSTER_SLURM:+$SAKER_CLUSTER_SLURM/sbin:}/usr/sbin:/usr/bin:/sbin:/bin" HOME=/root \
    SLURM_CONF="$SLURM_CONF" slurmd -N "$1" -f "$SLURM_CONF"
}

# elastic_attempt_nodes OUT N: the node count saker-run printed for attempt N.
elastic_attempt_nodes() {
  sed -n "s/^saker-run: attempt $2 starting at .*, \([0-9]*\) nodes, [0-9]* ranks)$/\1/p" "$1" | tail -n 1
}

# elastic_breakdown OUT FIELD: a field of saker-run's first recovery breakdown line (seconds).
elastic_breakdown() {
  grep -m1 'recovery breakdown' "$1" | sed -n "s/.*[ :]$2 \([0-9.]*\).*/\1/p"
}
