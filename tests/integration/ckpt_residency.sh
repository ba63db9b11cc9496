#!/usr/bin/env bash
# The checkpoint residency rule through real Slurm: a job declares a resident, restricted
# dataset (sbatch --dataset=patients@v3, AE only, encrypted checkpoints required) and runs
# saker-train with the site policy. A checkpoint directory on the EU storage system is
# refused at start-up, before any training step, with the whole story and exit 78; an AE
# directory without a key is refused for want of encryption; with a key the run completes
# and its checkpoints are encrypted and carry the lineage.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/train_lib.sh"
it_require_root
it_tmpdir

# The sample two-zone policy with its storage mounts moved into our private directory.
site=$IT_TMP/site
mkdir -p "$site/lustre/ae" "$site/lustre/eu"
policy=$IT_TMP/policy.yaml
sed "s|/lustre/|$site/lustre/|g" "$SAKER_SRCDIR/tests/data/policy/two_zones.yaml" >"$policy"
key=$IT_TMP/ckpt.key
head -c 32 /dev/urandom >"$key"
chmod 0600 "$key"

it_cluster_up --nodes 3 --gpus-per-node 0 --cpus-per-node 2 --policy "$policy" \
  --partitions "gpu-ae=saker[1-2];cpu-ae=saker[1-2];gpu-eu=saker3"
it_jobs_as_user
if ((IT_AS_USER)); then  # the jobs' key and storage are the user's
  chown "$IT_USER:" "$key"
  chmod 1777 "$site/lustre/ae" "$site/lustre/eu"
fi
# Locality routes patients@v3 jobs to nodes with the replica's feature.
scontrol update NodeName='saker[1-2]' AvailableFeatures=lustre-ae ActiveFeatures=lustre-ae
train_setup
saker_ckpt="$SAKER_BUILDDIR/ckpt/saker-ckpt/saker-ckpt"

# run_job NAME CKPT_DIR [ENV=V...] -- [SAKER-TRAIN ARGS...]: an AE job declaring patients@v3
# (its lineage reaches saker-train as $SLURM_SPANK_SAKER_DATASETS); echoes the job id.
run_job() {
  local name=$1 dir=$2 envs=()
  shift 2
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  sbatch --parsable -A medical -p cpu-ae --dataset=patients@v3 -o "$IT_PREFIX/res-$name-%j.out" \
    --wrap "exec env ${envs[*]} $SAKER_TRAIN_BIN --data $TRAIN_DATA --steps 60 --ckpt-every 20 --log-every 20 \
            --layers 16 --ckpt-dir $dir $*"
}
exit_code() { scontrol show job -o "$1" | sed -n 's/.* ExitCode=\([0-9]*\):.*/\1/p'; }

# --- refused: the EU storage is outside patients' allowed zone (AE).
eu_dir=$site/lustre/eu/run1
job=$(run_job eu "$eu_dir" -- --policy "$policy" --ckpt-key "$key")
assert_eq FAILED "$(it_job_wait "$job" 60)" "the job writing checkpoints to EU storage fails"
assert_eq 78 "$(exit_code "$job")" "saker-train exits 78: refused by the site policy"
out=$(cat "$IT_PREFIX/res-eu-$job.out")
assert_contains "$out" "refusing to save checkpoints to $eu_dir" "the message names the directory"
assert_contains "$out" "is on storage lustre-eu in zone eu (DE)" "... its storage system and zone"
assert_contains "$out" "trained on dataset patients@v3, which may only be kept in ae (AE)" \
  "... the dataset and its allowed zones"
assert_contains "$out" "write it under $site/lustre/ae" "... and where to write instead"
assert_contains "$out" "site policy $policy" "... and the policy file"
assert_not_contains "$out" "step 20/60" "no training step ran before the refusal"
assert_rc 1 "nothing was created on the EU storage" -- test -e "$eu_dir"

# --- refused: the AE storage is allowed, but restricted data requires encrypted checkpoints.
ae_dir=$site/lustre/ae/run1
# No --policy and a user-exported SAKER_POLICY pointing elsewhere: spank_saker.so sets
# SAKER_POLICY to the site's policy (plugstack policy=) in every task, and it wins.
job=$(SAKER_POLICY=/nonexistent/user-policy.yaml run_job nokey "$ae_dir" --)
assert_eq FAILED "$(it_job_wait "$job" 60)" "the unencrypted job fails (site policy from spank_saker.so)"
assert_eq 78 "$(exit_code "$job")" "saker-train exits 78 without a key"
out=$(cat "$IT_PREFIX/res-nokey-$job.out")
assert_contains "$out" "refusing to save checkpoints unencrypted to $ae_dir" "the message names the directory"
assert_contains "$out" "requires encryption for a model trained on patients@v3" "... and why"
assert_contains "$out" "--ckpt-key" "... and the fix"

# --- allowed: AE storage with a key.
job=$(run_job ok "$ae_dir" "SAKER_POLICY=$policy" "SAKER_CKPT_KEY=$key" --)
assert_eq COMPLETED "$(it_job_wait "$job" 90)" "the job with an allowed directory and a key completes"
out=$(cat "$IT_PREFIX/res-ok-$job.out")
assert_contains "$out" "checkpoint destination $ae_dir allowed by the site policy for lineage 'patients@v3' (encrypted)" \
  "saker-train reports the passed check"
assert_contains "$out" "checkpoint of step 40 committed" "the periodic checkpoints were committed"
assert_rc 0 "saker-ckpt shows the last checkpoint" -- "$saker_ckpt" show "$ae_dir/ckpt-000000000040.h5"
assert_contains "$IT_OUT" "patients@v3" "the checkpoint records the lineage"
assert_contains "$IT_OUT" "aes-256-gcm" "the checkpoint is encrypted"
assert_rc 0 "saker-ckpt verify passes" -- "$saker_ckpt" verify "$ae_dir"
n_ckpts=$(ls "$ae_dir"/ckpt-*.h5 | grep -vc -- '-r[0-9]')
assert_rc 0 "saker-ckpt verify --progress passes" -- "$saker_ckpt" verify --progress "$ae_dir"
assert_contains "$IT_OUT" "[$n_ckpts/$n_ckpts]" "verify --progress counts the checkpoints (which of how many)"
assert_contains "$IT_OUT" "ETA" "verify --progress gives an ETA for the whole run"
assert_rc 0 "saker-ckpt prune --dry-run --progress passes" -- "$saker_ckpt" prune --keep 1 --dry-run --progress "$ae_dir"
assert_contains "$IT_OUT" "[1/$n_ckpts]" "prune --progress counts the checkpoints it verifies"
assert_rc 0 "saker-ckpt verify --policy passes in the AE zone" -- "$saker_ckpt" verify --policy "$policy" "$ae_dir"
# A checkpoint copied by hand onto the EU storage is caught by verify --policy.
mkdir -p "$site/lustre/eu/copy"
cp "$ae_dir/ckpt-000000000040.h5" "$site/lustre/eu/copy/"
assert_rc 4 "saker-ckpt verify --policy flags the copy on EU storage" -- \
  "$saker_ckpt" verify --policy "$policy" "$site/lustre/eu/copy"
assert_contains "$IT_OUT" "REFUSED" "verify --policy says REFUSED"
assert_contains "$IT_OUT" "is on storage lustre-eu in zone eu (DE)" "... and why"
it_finish
