// The per-step job key under plain srun (spank_saker.so, local context).
//
// Saker's collective library authenticates every connection with SAKER_JOB_KEY
// (saker-comm(3)). saker-run makes one per attempt; a plain `srun prog` gets one here:
// the plugin runs inside srun (slurm_spank_init, before srun reads --export) and srun
// copies its environment into the launch request, which reaches slurmstepd over Slurm's
// munge-authenticated RPC.
// spank_setenv works only in slurmstepd, so the key is set in srun's own environment.
#pragma once

#include <string>

namespace saker::spank {

inline constexpr const char* kJobKeyEnv = "SAKER_JOB_KEY";
inline constexpr const char* kJobKeyFileEnv = "SAKER_JOB_KEY_FILE";

// Sets SAKER_JOB_KEY to a fresh key in this process's environment unless the user (or
// saker-run) gave one already, as SAKER_JOB_KEY or SAKER_JOB_KEY_FILE. Returns "" on
// success, else why it failed (never holding key material). Never throws.
std::string ensure_step_job_key() noexcept;

}  // namespace saker::spank
