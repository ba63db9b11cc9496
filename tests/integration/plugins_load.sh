#!/usr/bin/env bash
# The skeleton plugins load into real daemons: spank_saker.so into sbatch/srun/slurmstepd,
# job_submit_saker.so into slurmctld, and the declared datasets reach slurmctld through
# the job's control environment.
source "$(dirname "$0")/lib.sh"
it_require_root
it_cluster_up --nodes 3 --gpus-per-node 4
ctld_log="$IT_PREFIX/log/slurmctld.log"

assert_rc 0 "sbatch --help runs" -- sbatch --help
assert_contains "$IT_OUT" "--dataset=NAME[@VERSION][,...]" "sbatch --help lists --dataset"
assert_rc 0 "srun --help runs" -- srun --help
assert_contains "$IT_OUT" "--dataset" "srun --help lists --dataset"

assert_contains "$(cat "$ctld_log")" "saker: job_submit/saker loaded" "slurmctld's log shows job_submit/saker loaded"

assert_rc 1 "a bad --dataset value is refused by sbatch" -- sbatch --dataset='pat/ients' --wrap true
assert_contains "$IT_OUT" "bad dataset 'pat/ients'" "the refusal names the value"
assert_contains "$IT_OUT" "NAME[@VERSION]" "the refusal shows the accepted syntax"
assert_rc 255 "a duplicate dataset is refused by srun (srun exits 255 when a SPANK option is refused)" -- srun --dataset=a,a true
assert_contains "$IT_OUT" "'a' is listed twice" "srun's refusal says what is wrong"

out_file="$IT_PREFIX/job-%j.out"
assert_rc 0 "sbatch with --dataset is accepted" -- \
  sbatch --parsable --dataset=imagenet@2012,patients -o "$out_file" --wrap 'echo "spank=$SLURM_SPANK_SAKER_DATASETS"'
job=$(tail -n1 <<<"$IT_OUT")
assert_eq COMPLETED "$(it_job_wait "$job" 60)" "the batch job completes"
assert_contains "$(cat "${out_file/\%j/$job}")" "spank=imagenet@2012,patients" \
  "the batch script sees the canonical dataset list"
assert_contains "$(cat "$ctld_log")" "datasets=imagenet@2012,patients" \
  "job_submit/saker saw the datasets in spank_job_env"

assert_rc 0 "srun --dataset runs a step" -- srun -N1 --dataset=cifar10@v1 hostname
assert_contains "$(cat "$ctld_log")" "datasets=cifar10@v1" "job_submit/saker saw srun's datasets"

assert_rc 0 "slurmctld is still alive" -- scontrol ping
assert_contains "$IT_OUT" "UP" "scontrol ping reports the controller up"
it_finish
