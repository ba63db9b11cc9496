#!/usr/bin/env bash
# The three sbatch templates run saker-train through saker-run on a real 3-node cluster,
# and training is deterministic: the same seed and world size give the same final weight
# hash under Slurm (PMI2 bootstrap, ranks on different nodes) as with saker-run --local.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/train_lib.sh"
it_require_root
it_cluster_up --nodes 3 --gpus-per-node 4 --cpus-per-node 4 --no-job-submit
it_jobs_as_user   # the jobs and local runs are an ordinary user's (issue 28)
train_setup

h2=$(local_hash 2)
assert_eq 32 "${#h2}" "saker-run --local -n 2 prints a 128-bit weight hash"

# CPU-only template: one node, two ranks.
job=$(submit_template train-cpu "$IT_PREFIX/ckpt-cpu" -p all)
assert_eq COMPLETED "$(it_job_wait "$job" 90)" "CPU template completes"
out="$IT_PREFIX/train-cpu-$job.out"
assert_eq "$h2" "$(hash_of "$out")" "CPU template (1 node, 2 ranks) ends with the --local hash"
assert_contains "$(cat "$out")" "samples/s" "progress lines show samples/s"
assert_contains "$(cat "$out")" "eta" "progress lines show the ETA"
assert_contains "$(cat "$out")" "periodic checkpoint of step 50 committed" "checkpoints are taken every 50 steps"

# Multi-node GPU template: two nodes, one GPU per rank (fake GPUs; training itself is on CPU).
job=$(submit_template train-gpu "$IT_PREFIX/ckpt-gpu" -p all -N2 --ntasks-per-node=1 --gpus-per-node=1)
assert_eq COMPLETED "$(it_job_wait "$job" 90)" "GPU template completes"
out="$IT_PREFIX/train-gpu-$job.out"
assert_contains "$(cat "$out")" "GPUs per node: 1" "the GPU template asked Slurm for GPUs"
assert_eq "$h2" "$(hash_of "$out")" "GPU template (2 nodes x 1 rank) ends with the --local hash"
# --device auto: the fake GPUs are no CUDA devices, so every rank takes the host ring and
# says why (built without NCCL, or the CUDA runtime's reason).
assert_contains "$(cat "$out")" "saker-train: gradients allreduced over saker's host ring (rank 0 on " \
  "the GPU template falls back to the host ring where no CUDA device is visible, and says why"
# --device gpu (SAKER_TRAIN_DEVICE=gpu) refuses on every rank: exit 78, not restarted.
job=$(SAKER_TRAIN_DEVICE=gpu submit_template train-gpu "$IT_PREFIX/ckpt-gpu-refused" -p all -N2 \
  --ntasks-per-node=1 --gpus-per-node=1)
assert_eq FAILED "$(it_job_wait "$job" 90)" "SAKER_TRAIN_DEVICE=gpu without a CUDA device fails the job"
out="$IT_PREFIX/train-gpu-$job.out"
assert_contains "$(cat "$out")" "--device gpu: rank 0 on " "the refusal names the rank and its host"
assert_contains "$(cat "$out")" "not restarting" "saker-run does not restart a refused step (exit 78)"
assert_not_contains "$(cat "$out")" "weights xxh3_128" "no training ran"

# Preemptible template, not interrupted: same hash again, and its flags are in the job.
job=$(submit_template train-preemptible "$IT_PREFIX/ckpt-pre" -p all)
assert_rc 0 "the preemptible job is visible" -- scontrol show job "$job"
assert_contains "$IT_OUT" "Requeue=1" "the preemptible template asks for --requeue"
assert_eq COMPLETED "$(it_job_wait "$job" 90)" "preemptible template completes"
assert_eq "$h2" "$(hash_of "$IT_PREFIX/train-preemptible-$job.out")" "preemptible template ends with the --local hash"

# A different world size is a different run: its hash differs (the check can fail).
h1=$(local_hash 1)
assert_eq 32 "${#h1}" "one rank prints a hash too"
assert_rc 1 "world size 1 and 2 give different hashes (floating-point sums differ)" -- test "$h1" = "$h2"
it_finish
