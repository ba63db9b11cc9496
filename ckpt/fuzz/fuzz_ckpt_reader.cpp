// libFuzzer target over the checkpoint reader: the input is the raw bytes of a main
// checkpoint file (world size 1), written to a temporary file and judged by the same
// code path as verify and every load. Any outcome but "ok" or a saker::Error (a crash,
// a sanitizer report, a hang) is a bug. `make fuzz`; corpus in ckpt/fuzz/corpus.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ckpt/manifest.hpp"
#include "common/error.hpp"
#include "saker/ckpt.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/saker-ckpt-fuzz.XXXXXX";
    const char* d = mkdtemp(tmpl);
    if (d == nullptr) std::abort();
    return std::string(d);
  }();
  const std::string file = dir + "/ckpt-000000000060.h5";
  FILE* f = std::fopen(file.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  const saker::ckpt::Verdict v = saker::ckpt::verify(file);
  (void)v;
  // The manifest parser behind the checksum, reached directly: the checksum keeps random
  // bytes from ever getting there through verify().
  try {
    saker::ckpt::manifest::decode(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  } catch (const saker::Error&) {
  }
  return 0;
}
