#!/usr/bin/env bash
# The plugins load into real daemons: spank_saker.so into sbatch/srun/slurmstepd,
# job_submit_saker.so into slurmctld. With no policy configured, declared datasets are
# refused (fail closed) and other jobs run (fail safe). Policy decisions themselves are
# covered by policy_job_submit.sh.
source "$(dirname "$0")/lib.sh"
it_require_root
it_cluster_up --nodes 3 --gpus-per-node 4
it_jobs_as_user
ctld_log="$IT_PREFIX/log/slurmctld.log"

assert_rc 0 "sbatch --help runs" -- sbatch --help
assert_contains "$IT_OUT" "--dataset=NAME[@VERSION][,...]" "sbatch --help lists --dataset"
assert_rc 0 "srun --help runs" -- srun --help
assert_contains "$IT_OUT" "--dataset" "srun --help lists --dataset"

assert_contains "$(cat "$ctld_log")" "saker: job_submit/saker loaded" "slurmctld's log shows job_submit/saker loaded"

assert_rc 255 "a bad --dataset value is refused by sbatch" -- sbatch --dataset='pat/ients' --wrap true
assert_contains "$IT_OUT" "bad dataset 'pat/ients'" "the refusal names the value"
assert_contains "$IT_OUT" "NAME[@VERSION]" "the refusal shows the accepted syntax"
assert_rc 255 "a duplicate dataset is refused by srun (srun exits 255 when a SPANK option is refused)" -- srun --dataset=a,a true
assert_contains "$IT_OUT" "'a' is listed twice" "srun's refusal says what is wrong"

# No policy is configured on this cluster: job_submit/saker fails closed for jobs that
# declare datasets, and stays out of the way of every other job (availability).
assert_rc 1 "without a policy, a job that declares datasets is refused" -- \
  sbatch --dataset=imagenet@2012,patients --wrap true
assert_contains "$IT_OUT" "no valid data policy is loaded" "the refusal says why"
assert_contains "$(cat "$ctld_log")" "job_submit_saker.conf: cannot read" "slurmctld's log says the configuration is missing"
it_wait_for 10 "the refusal is in the audit log" grep -q '"decision":"deny"' "$IT_PREFIX/etc/saker-audit.log"
assert_rc 1 "without a policy, srun --dataset is refused too" -- srun -N1 --dataset=cifar10@v1 true
assert_contains "$IT_OUT" "no valid data policy is loaded" "srun's refusal says why"

out_file="$IT_PREFIX/job-%j.out"
assert_rc 0 "a job without datasets is accepted" -- \
  sbatch --parsable -o "$out_file" --wrap 'echo "ran on $SLURMD_NODENAME"'
job=$(tail -n1 <<<"$IT_OUT")
assert_eq COMPLETED "$(it_job_wait "$job" 60)" "the batch job completes"
assert_contains "$(cat "${out_file/\%j/$job}")" "ran on saker" "the batch script ran on a cluster node"
assert_rc 0 "srun without datasets runs a step" -- srun -N1 hostname

assert_rc 0 "slurmctld is still alive" -- scontrol ping
assert_contains "$IT_OUT" "UP" "scontrol ping reports the controller up"
it_finish
