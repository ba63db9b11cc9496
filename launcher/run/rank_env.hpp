// The per-rank environment saker-run hands to every rank it starts.
//
// Two audiences read it: Saker's collective library (SAKER_* variables) and
// torch.distributed's env:// rendezvous (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE). torchrun would set the latter, but it does not run
// everywhere (it crashes with Debian's Python here), so saker-run sets them for plain
// processes. Pure functions over string maps so they are unit-testable without Slurm.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace saker::run {

using Env = std::map<std::string, std::string>;

// Names of the variables saker-run exports (also documented in saker-run(1)).
inline constexpr const char* kCkptDirEnv = "SAKER_CKPT_DIR";
inline constexpr const char* kAttemptEnv = "SAKER_RUN_ATTEMPT";
inline constexpr const char* kPreemptMarkerEnv = "SAKER_PREEMPT_MARKER";
// A file in the attempt's run directory where a program that keeps its own checkpoints
// writes their directory (one line), e.g. saker.torch's checkpoint module: saker-run's
// restart message then says the program resumes from them (issue 31).
inline constexpr const char* kCkptNoteEnv = "SAKER_RUN_CKPT_NOTE";
// A file in the attempt's run directory where saker-run writes the new world size when the
// run grows (issue 32): the ranks stop at their next checkpoint boundary with exit 75.
inline constexpr const char* kResizeNoticeEnv = "SAKER_RESIZE_NOTICE";
// The attempt's secret, read by Saker's collective library (saker-comm(3)).
inline constexpr const char* kJobKeyEnv = "SAKER_JOB_KEY";
inline constexpr const char* kTransitEnv = "SAKER_COMM_TRANSIT";

// The process environment as a map.
Env current_environment();

// Slurm's compact tasks-per-node syntax ("2(x3),1") expanded to one count per node
// ({2,2,2,1}). Throws saker::Error naming the text when it is malformed.
std::vector<int> parse_tasks_per_node(const std::string& spec);

// The rank variables of one task started by srun, derived from what srun set in its
// environment (SLURM_PROCID, SLURM_NTASKS/SLURM_STEP_NUM_TASKS, SLURM_LOCALID,
// SLURM_NODEID, SLURM_STEP_TASKS_PER_NODE/SLURM_TASKS_PER_NODE). Throws saker::Error
// naming the missing variable when the task was not started by srun.
Env rank_env_from_slurm(const Env& task_env);

// The rank variables of rank `rank` of `world` local processes (saker-run --local): one
// node, one torchrun role ("default"), so ROLE_RANK = RANK and GROUP_WORLD_SIZE = 1.
Env local_rank_env(int rank, int world);

// torchrun's elastic-agent variables, the same on every rank of one attempt:
// TORCHELASTIC_RESTART_COUNT (restarts of the step so far in this saker-run),
// TORCHELASTIC_MAX_RESTARTS (--max-restarts) and TORCHELASTIC_RUN_ID (the Slurm job id, or
// "local-PID" with --local), so scripts that read them behave as under torchrun.
Env elastic_env(int restart_count, int max_restarts, const std::string& run_id);

// SAKER_JOB_KEY: 32 fresh bytes from the kernel's CSPRNG as 64 lower-case hex digits, new
// on every call (saker-run calls it once per attempt). Throws saker::Error when the kernel
// gives no random bytes; the error never holds key material.
Env job_key_env();

// SAKER_COMM_TRANSIT for the ranks: `option` (--transit) when given, else `inherited`
// (saker-run's own SAKER_COMM_TRANSIT); empty map when both are empty, so that the
// library's default (auth) applies. Throws saker::Error naming the value and where it
// came from when it is not auth, encrypt or off.
Env transit_env(const std::string& option, const std::string& inherited);

// MASTER_ADDR/MASTER_PORT plus the store address Saker's collective library reads.
Env rendezvous_env(const std::string& master_addr, int master_port);

}  // namespace saker::run
