// Helpers shared by the ckpt unit tests: a private temporary directory and states with
// deterministic contents.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "saker/ckpt.hpp"

namespace saker::ckpt::testing {

class TempDir {
 public:
  TempDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "saker-ckpt-test-XXXXXX").string();
    if (::mkdtemp(templ.data()) == nullptr) std::abort();
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

inline std::vector<std::byte> random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> out(n);
  for (std::size_t i = 0; i < n; i += 8) {
    const std::uint64_t v = rng();
    std::memcpy(out.data() + i, &v, std::min<std::size_t>(8, n - i));
  }
  return out;
}

// A small trainer-like state: replicated weights, RNG and cursor bytes.
inline State make_state(std::uint64_t step, std::size_t floats = 1024) {
  State st;
  st.step = step;
  st.epoch = step / 10;
  st.config = R"({"lr": 0.01, "batch": 64})";
  st.lineage = {{"imagenet", "2012"}, {"patients", "v3"}};
  st.tensors.push_back(Tensor::owning("fc1.weight", DType::f32, {floats / 4, 4}, random_bytes(floats * 4, step * 7 + 1)));
  st.tensors.push_back(Tensor::owning("fc1.bias", DType::f32, {4}, random_bytes(16, step * 7 + 2)));
  st.tensors.push_back(Tensor::owning("optimizer.step", DType::i64, {}, random_bytes(8, step)));
  st.rng_state = random_bytes(40, step + 100);
  st.data_cursor = random_bytes(12, step + 200);
  return st;
}

inline bool same_bytes(const Tensor& a, const Tensor& b) {
  // memcmp on an empty tensor's null data pointer is undefined, even with size 0.
  return a.bytes.size() == b.bytes.size() &&
         (a.bytes.empty() || std::memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size()) == 0);
}

inline void write_file(const std::filesystem::path& p, const std::string& bytes, mode_t mode) {
  std::ofstream(p, std::ios::binary) << bytes;
  ::chmod(p.c_str(), mode);
}

}  // namespace saker::ckpt::testing
