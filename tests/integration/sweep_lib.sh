# Helpers shared by the sweep_*.sh integration tests (sourced after lib.sh and train_lib.sh):
# sweep files over saker-train with our programs, and waiting for a sweep's job array.

SWEEP_BIN="$SAKER_BUILDDIR/sweep/saker-sweep/saker-sweep"
# sweep ARGS...: saker-sweep as the test user once it_jobs_as_user ran (it submits with
# sbatch and keeps NAME.sweep/ in the current directory, both the user's).
sweep() { it_job "$SWEEP_BIN" "$@"; }

# sweep_setup: the scratch directory (cwd) and the dataset every sweep trains on.
sweep_setup() {
  [[ -x $SWEEP_BIN && -x $SAKER_TRAIN_BIN && -x $SAKER_RUN_BIN ]] || {
    echo "sweep: build saker-sweep, saker-run and saker-train first (make -j2)" >&2
    exit 1
  }
  it_tmpdir
  cd "$IT_TMP" || exit 1
  it_job "$SAKER_TRAIN_BIN" make-data --out train.h5 --samples 4096 --features 16 --classes 4 --seed 3 >/dev/null
}

# write_sweep NAME SAMPLES "TRAIN ARGS" [YAML LINES...]: NAME.yaml, a random sweep of the
# learning rate and width (seed 42: the same trials for every sweep of the same size).
write_sweep() {
  local name=$1 samples=$2 train_args=$3 line
  shift 3
  {
    echo "version: 1"
    echo "name: $name"
    echo "command: $SAKER_RUN_BIN --grace 20 --ckpt-dir {ckpt_dir} -- $SAKER_TRAIN_BIN --data train.h5 --lr {lr}" \
      "--layers {width},{width} --steps {budget} --metrics-file {metrics} --ckpt-every 25 --log-every 25 --seed 7 $train_args"
    echo "space:"
    echo "  lr: {log_uniform: [3e-4, 3e-2]}"
    echo "  width: {choice: [8, 16, 32]}"
    echo "search: {seed: 42, samples: $samples}"
    echo "metric: {name: eval_loss, goal: minimize}"
    echo "budget: {steps: 200}"
    for line in "$@"; do echo "$line"; done
  } >"$name.yaml"
}

# array_of NAME: the job array NAME's sweep submitted last.
array_of() { tail -n 1 "$1.sweep/jobs" | cut -d' ' -f1; }

# wait_array ARRAY TIMEOUT: until Slurm has no task of the array left (requeued ones count).
wait_array() {
  it_wait_for "$2" "job array $1 finished" bash -c "[[ -z \$(squeue -h -r -j $1 2>/dev/null) ]]"
}

# task_job ARRAY TASK: the job id of one task of the array (what scancel and rank_pid need).
task_job() { squeue -h -r -j "$1" -o '%i %A' 2>/dev/null | awk -v t="$1_$2" '$1 == t { print $2 }'; }

# trial_state DIR ID: the trial's state (completed, stopped, ...).
trial_state() { sed -n 's/^state=//p' "$1/trials/$2/state" 2>/dev/null; }

# metric_at DIR ID STEP [NAME]: the trial's last report of NAME (eval_loss) at STEP.
metric_at() {
  awk -v s="step=$3" -v k="${4:-eval_loss}=" '$1 == s { for (i = 2; i <= NF; i++) if (index($i, k) == 1) v = substr($i, length(k) + 1) } END { print v }' \
    "$1/trials/$2/metrics"
}
