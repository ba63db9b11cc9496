// The trainer's random numbers: xoshiro256** seeded through splitmix64. Its whole state
// is 32 bytes that go into every checkpoint, so a resumed run draws exactly the numbers
// the uninterrupted run would have drawn. Normals use Box-Muller from this stream only
// (never std::normal_distribution, whose algorithm differs between libraries).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace saker::train {

class Rng {
 public:
  explicit Rng(std::uint64_t seed = 0);
  // A stream derived from (seed, stream): independent of the order streams are made.
  static Rng derived(std::uint64_t seed, std::uint64_t stream);

  std::uint64_t next_u64();
  double uniform();                   // [0, 1)
  double normal();                    // mean 0, standard deviation 1
  std::uint64_t below(std::uint64_t n);  // [0, n), unbiased

  std::vector<std::byte> save() const;  // 32 bytes, little-endian words
  // Throws saker::Error when the bytes are not a saved state.
  void restore(const std::vector<std::byte>& bytes);
  bool operator==(const Rng&) const = default;

 private:
  std::array<std::uint64_t, 4> s_{};
};

}  // namespace saker::train
