// From Slurm's job_desc_msg_t to the policy engine's JobRequest.
#pragma once

#include <cstdint>
#include <string>

extern "C" {
#include <slurm/slurm.h>
}

#include "saker/policy.hpp"

namespace saker::job_submit {

// The GPU count in a TRES request string as 22.05 writes it ("gres:gpu:4",
// "gres/gpu:a100:2", "gres:gpu=4", several comma- or semicolon-separated); 0 if none.
std::uint32_t gpus_in_tres(const char* tres);

// Name and groups of a uid, cached (NSS lookups can be slow; a job_submit callback
// runs under slurmctld's job write lock). Not thread-safe: slurmctld serialises
// job_submit/job_modify under that lock.
struct Identity {
  std::string user;
  std::vector<std::string> groups;
};
const Identity& identity_of(std::uint32_t uid);

// Builds the request; datasets come from the job's control environment (throws
// saker::Error on a malformed SAKER_DATASETS).
policy::JobRequest request_from(const job_desc_msg_t& job, std::uint32_t submit_uid);

}  // namespace saker::job_submit
