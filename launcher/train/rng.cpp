#include "launcher/train/rng.hpp"

#include <cmath>
#include <cstring>
#include <numbers>

#include "common/error.hpp"

namespace saker::train {
namespace {

std::uint64_t splitmix64(std::uint64_t& x) {
  std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Rng::Rng(std::uint64_t seed) {
  for (auto& word : s_) word = splitmix64(seed);
}

Rng Rng::derived(std::uint64_t seed, std::uint64_t stream) {
  std::uint64_t mix = seed;
  const std::uint64_t a = splitmix64(mix);
  return Rng(a ^ (stream * 0xd1342543de82ef95ULL + 0x2545f4914f6cdd1dULL));
}

std::uint64_t Rng::next_u64() {
  const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const std::uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double Rng::normal() {
  // Box-Muller; one draw per call keeps the state a pure function of the call count.
  const double u1 = 1.0 - uniform();  // (0, 1]
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

std::uint64_t Rng::below(std::uint64_t n) {
  SAKER_ASSERT(n > 0, "below(0)");
  const std::uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  std::uint64_t x;
  do x = next_u64(); while (x >= limit);
  return x % n;
}

std::vector<std::byte> Rng::save() const {
  std::vector<std::byte> out(sizeof s_);
  std::memcpy(out.data(), s_.data(), sizeof s_);  // x86-64 and aarch64 are little-endian
  return out;
}

void Rng::restore(const std::vector<std::byte>& bytes) {
  if (bytes.size() != sizeof s_) {
    throw Error(explain("RNG state of " + std::to_string(bytes.size()) + " bytes",
                        "saker-train saves 32 bytes (xoshiro256**)",
                        "resume from a checkpoint written by saker-train"));
  }
  std::memcpy(s_.data(), bytes.data(), sizeof s_);
}

}  // namespace saker::train
