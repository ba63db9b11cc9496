// From Slurm's job_desc_msg_t to the policy engine's JobRequest.
#pragma once

#include <cstdint>
#include <string>

extern "C" {
#include <slurm/slurm.h>
}

#include "plugins/common/identity.hpp"
#include "saker/policy.hpp"

namespace saker::job_submit {

// The GPU count in a TRES request string as 22.05 writes it ("gres:gpu:4",
// "gres/gpu:a100:2", "gres:gpu=4", several comma- or semicolon-separated); 0 if none.
std::uint32_t gpus_in_tres(const char* tres);

// Builds the request; datasets come from the job's control environment (throws
// saker::Error on a malformed SAKER_DATASETS).
policy::JobRequest request_from(const job_desc_msg_t& job, std::uint32_t submit_uid);

}  // namespace saker::job_submit
