// The TCP store's port under plain srun (no PMI2): every rank computes it from the job
// and step ids alone, so all agree without talking.
#pragma once

namespace saker::comm {

// 20000-31999: below Linux's default ephemeral range (32768-60999), where the kernel
// hands out ports for other programs' outgoing connections and bind(0); a port there may
// be taken by any socket on the node (a data loader's connection) when rank 0 binds it.
// A job's steps get distinct ports; jobs 375 apart can share one (12000 / gcd(64, 12000)),
// and so can job j's step 64 and job j+1's step 0. SAKER_STORE_PORT overrides it.
constexpr int slurm_store_port(long job, long step) {
  const auto j = static_cast<unsigned long long>(job) % 12000;  // unsigned: ids Slurm gives are never negative,
  const auto s = static_cast<unsigned long long>(step) % 12000;  // and a bad one must not leave the range
  return static_cast<int>(20000 + (j * 64 + s) % 12000);
}

}  // namespace saker::comm
