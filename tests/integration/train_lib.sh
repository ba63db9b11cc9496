# Helpers shared by the train_*.sh integration tests (sourced after lib.sh).
# They run saker-train through saker-run and the sbatch templates on the local cluster
# and compare final weight hashes.
#
# The jobs, local runs included, are an ordinary user's (issue 28: a real site is
# multi-tenant): a test calls it_jobs_as_user (lib.sh) before train_setup, and from then on
# the data, the runs and their checkpoints are $IT_USER's. Root stays the one that kills
# ranks and daemons and signals jobs, as a crash, a lost machine or Slurm's preemption would.
# A test that does not call it_jobs_as_user runs everything as itself, as before.

SAKER_RUN_BIN="$SAKER_BUILDDIR/launcher/saker-run/saker-run"
SAKER_TRAIN_BIN="$SAKER_BUILDDIR/launcher/saker-train/saker-train"
TEMPLATES="$SAKER_SRCDIR/scripts/sbatch"
# A run of ~200 steps that takes several seconds, so faults land mid-run; checkpoints
# every 50 steps. The same arguments for every run of a test: the hashes must agree.
TRAIN_MODEL_ARGS="--steps 200 --layers 32,32 --batch 64 --ckpt-every 50 --log-every 25 --seed 7"
TRAIN_ARGS="$TRAIN_MODEL_ARGS --step-sleep-ms 40"

# train_setup: the dataset every test trains on.
train_setup() {
  [[ -x $SAKER_RUN_BIN && -x $SAKER_TRAIN_BIN ]] || {
    echo "train: build saker-run and saker-train first (make -j2)" >&2
    exit 1
  }
  TRAIN_DATA="$IT_PREFIX/train.h5"
  it_job "$SAKER_TRAIN_BIN" make-data --out "$TRAIN_DATA" --samples 4096 --features 16 --classes 4 --seed 3 >/dev/null
}

# train_fault_start [SBATCH ARGS...]: what every fault test starts from: a 3-node CPU
# cluster, the dataset, h (the uninterrupted 2-rank hash) and the preemptible template
# submitted across the nodes: job (its id) and out (its output file).
train_fault_start() {
  it_cluster_up --nodes 3 --gpus-per-node 0 --cpus-per-node 4 --no-job-submit
  it_jobs_as_user
  train_setup
  h=$(local_hash 2)
  job=$(submit_template train-preemptible "$IT_PREFIX/ckpt" -p all "$@")
  out="$IT_PREFIX/train-preemptible-$job.out"
}

# hash_of FILE: the final weight hash saker-train printed (empty if none).
hash_of() { sed -n 's/^saker-train: weights xxh3_128 \([0-9a-f]*\)$/\1/p' "$1" | tail -n 1; }

# local_hash N: final hash of an uninterrupted `saker-run --local -n N` run (no Slurm).
local_hash() {
  local out="$IT_PREFIX/local-$1.out"
  # shellcheck disable=SC2086
  it_job "$SAKER_RUN_BIN" --local -n "$1" -- "$SAKER_TRAIN_BIN" --data "$TRAIN_DATA" $TRAIN_MODEL_ARGS >"$out" 2>&1
  hash_of "$out"
}

# submit_template NAME CKPT_DIR SBATCH_ARGS...: submits scripts/sbatch/NAME.sbatch with our
# programs and data; echoes the job id. Output goes to $IT_PREFIX/NAME-<job>.out. sbatch is
# lib.sh's: the test user's after it_jobs_as_user.
submit_template() {
  local name=$1 ckpt=$2
  shift 2
  SAKER_RUN="$SAKER_RUN_BIN" SAKER_TRAIN="$SAKER_TRAIN_BIN" SAKER_DATA="$TRAIN_DATA" SAKER_CKPT_DIR="$ckpt" \
    SAKER_TRAIN_ARGS="$TRAIN_ARGS" SAKER_GRACE=20 \
    sbatch --parsable --export=ALL -D "$IT_PREFIX" -o "$IT_PREFIX/$name-%j.out" "$@" "$TEMPLATES/$name.sbatch"
}

# user_bg PIDFILE CMD...: CMD in the background as the test user (it_job); the program's own
# pid goes to PIDFILE (for signals: $! is the shell that switches user), while $! still
# gives CMD's exit status to wait.
user_bg() {
  local pidfile=$1
  shift
  rm -f "$pidfile"
  # shellcheck disable=SC2016
  it_job sh -c 'echo $$ >"$0.tmp" && mv "$0.tmp" "$0" && exec "$@"' "$pidfile" "$@" &
}

# bg_pid PIDFILE: the pid user_bg wrote (waits up to 30 s for it).
bg_pid() {
  local deadline=$((SECONDS + 30))
  until [[ -s $1 ]] || ((SECONDS >= deadline)); do sleep 0.1; done
  cat "$1"
}

# wait_for_line TIMEOUT FILE REGEX: until FILE has a line matching REGEX.
wait_for_line() { it_wait_for "$1" "'$3' in $(basename "$2")" grep -qE "$3" "$2"; }

now() { date +%s.%N; }

# rank_pid JOB RANK: pid of the saker-train process of that rank of the job on THIS
# cluster: tests run in parallel, each cluster numbers its jobs from 1, so the job id
# alone would find another test's rank; the job inherits our SLURM_CONF.
rank_pid() {
  local job=$1 rank=$2 pid env
  for pid in $(pgrep -x saker-train); do
    env=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null) || continue
    if grep -qx "SLURM_CONF=$SLURM_CONF" <<<"$env" && grep -qx "SLURM_JOB_ID=$job" <<<"$env" &&
      grep -qx "RANK=$rank" <<<"$env"; then
      echo "$pid"
      return 0
    fi
  done
  return 1
}

# release_requeued JOB: waits until the requeued job is PENDING and echoes that moment.
# Slurm holds a requeued job for cred_expire (+1) seconds; lifting the hold early
# (StartTime=now) makes slurmd refuse the batch launch ("Job credential revoked") and
# the job FAILS, so the tests wait the hold out and leave it out of the recovery time.
release_requeued() {
  local job=$1
  it_wait_for 60 "job $job pending after its requeue" \
    bash -c "squeue -h -j $job -o %T | grep -qx PENDING" >&2
  now
}

# recovery_seconds OUT T_FAIL [T_PENDING]: seconds from the failure to the first step after
# resume, minus Slurm's requeue hold (from T_PENDING to the requeued batch script's start).
recovery_seconds() {
  local out=$1 t_fail=$2 t_pending=${3:-} t_first t_start hold=0
  t_first=$(sed -n 's/^saker-train: first step after resume: step [0-9]* at \([0-9.]*\)$/\1/p' "$out" | tail -n 1)
  if [[ -n $t_pending ]]; then
    t_start=$(sed -n 's/^saker-run: attempt 1 starting at .* (t=\([0-9.]*\), .*restart count [1-9].*/\1/p' "$out" | tail -n 1)
    hold=$(awk -v a="$t_start" -v b="$t_pending" 'BEGIN { print a - b }')
  fi
  [[ -n $t_first ]] || { echo "n/a"; return; }
  awk -v a="$t_first" -v b="$t_fail" -v h="$hold" 'BEGIN { printf "%.1f", a - b - h }'
}
