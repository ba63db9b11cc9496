// Secret random bytes from the kernel's CSPRNG (getrandom(2)).
//
// Why not OpenSSL's RAND_bytes: spank_saker.so makes the per-step job key in srun, and
// the same .so is loaded into every slurmstepd, which must not load libcrypto (see
// common/sha256.hpp for what that costs). RAND_bytes seeds itself from getrandom(2);
// 32 bytes straight from it are as good a key, and cost no library.
#pragma once

#include <cstddef>
#include <string>

namespace saker::random {

// Fills `out` with `size` bytes from getrandom(2); false (errno set) when the kernel gives
// none. Never throws: the SPANK plugin calls it inside srun.
bool fill(void* out, std::size_t size) noexcept;

// A fresh per-job (or per-attempt, per-step) key: 32 random bytes as 64 lower-case hex
// digits, the form SAKER_JOB_KEY carries. Empty when the kernel gives no random bytes.
std::string job_key_hex();

}  // namespace saker::random
