// bench_ckpt: libsaker_ckpt against the raw peers, measured in the same run on the same
// filesystem:
//   save  1 GiB: Checkpointer::save (HDF5 metadata, xxh3-128, fsync, rename, dir fsync,
//                "latest") vs fwrite + fflush + fsync of the same bytes;
//   load  1 GiB: Checkpointer::load_latest (every checksum verified) vs read() of the
//                same bytes into buffers of the tensors' sizes, allocated the same way
//                (new[], untouched). Both start from the same page-cache state: both files
//                are evicted right before each read, so neither is cached and each reader
//                finds the other's pages just freed. Who goes first alternates.
//   async stall: the time save_async blocks the caller vs a memcpy of the state into a
//                warm buffer.
//   provenance:  the same save and load without provenance (issue 30), in the same rounds:
//                the saves carry the record a job's would (a signed attestation, the code
//                identity, one parent, as after a resume), the loads take the parent's
//                SHA-256 (on a thread, after the load returns: timed both to the load's
//                return and to the digest's end); their peers run with
//                provenance::set_omitted_for_benchmark, a switch only a program calling it
//                reaches. A second save without it gives the noise floor, and the record's
//                own CPU time is timed apart.
// Targets: save and load >= 0.9x the raw peer's throughput, stall <= 1.5x the memcpy, save
// with provenance <= 1.01x the save without.
//
// Environment: SAKER_BENCH_DIR (default: the current directory), SAKER_BENCH_CKPT_MIB
// (default 1024), SAKER_BENCH_REPEAT (default 3; medians and min-max are printed),
// SAKER_BENCH_READ_CACHE (automatic, keep or drop: Options::read_cache for the load;
// automatic drops here, as this is a single process), SAKER_ATTESTATION (an attestation
// file to record; default: one signed here with a throwaway key).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/provenance.hpp"
#include "common/log.hpp"
#include "provenance/attestation.hpp"
#include "saker/ckpt.hpp"

namespace fs = std::filesystem;
namespace ck = saker::ckpt;
namespace pv = saker::provenance;
using Clock = std::chrono::steady_clock;

namespace {

std::size_t env_size(const char* name, std::size_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// "min-max" of per-round throughputs in GB/s, to show the spread behind a median.
std::string spread(const std::vector<double>& seconds, double gb) {
  const auto [lo, hi] = std::minmax_element(seconds.begin(), seconds.end());
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f-%.2f", gb / *hi, gb / *lo);
  return buf;
}

// Drops a file's (clean, fsync'ed) pages from the page cache so the next read hits disk.
void evict(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void evict_dir(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) evict(e.path());
}

// Before each timed phase: no dirty data left by the previous phase (or by another
// program on this filesystem) may be written back on this phase's clock.
void settle(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::syncfs(fd);
  ::close(fd);
}

double raw_write(const fs::path& file, const std::vector<std::vector<float>>& tensors) {
  const auto t0 = Clock::now();
  std::FILE* f = std::fopen(file.c_str(), "wb");
  if (!f) std::abort();
  for (const auto& t : tensors)
    if (std::fwrite(t.data(), sizeof(float), t.size(), f) != t.size()) std::abort();
  std::fflush(f);
  ::fsync(::fileno(f));
  std::fclose(f);
  return since(t0);
}

// One destination per tensor, like the loader's, filled by read() in 8 MiB calls.
double raw_read(const fs::path& file, const std::vector<std::vector<float>>& tensors) {
  const auto t0 = Clock::now();
  std::vector<std::unique_ptr<std::byte[]>> bufs;
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  for (const auto& t : tensors) {
    const std::size_t bytes = t.size() * sizeof(float);
    bufs.emplace_back(new std::byte[bytes]);
    std::size_t done = 0;
    while (done < bytes) {
      const ssize_t n = ::read(fd, bufs.back().get() + done, std::min<std::size_t>(bytes - done, std::size_t{8} << 20));
      if (n <= 0) std::abort();
      done += static_cast<std::size_t>(n);
    }
  }
  ::close(fd);
  return since(t0);
}

// "median (min-max)" of per-round ratios a[i] / b[i].
std::string ratios(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> r;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) r.push_back(a[i] / b[i]);
  const auto [lo, hi] = std::minmax_element(r.begin(), r.end());
  char buf[80];
  std::snprintf(buf, sizeof buf, "%.3fx (per-round %.3f-%.3f)", median(r), *lo, *hi);
  return buf;
}

std::string load_average() {
  double l[3] = {0, 0, 0};
  if (::getloadavg(l, 3) != 3) return "unknown";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f %.2f %.2f", l[0], l[1], l[2]);
  return buf;
}

// Runs the sides in turn, the first one moving on by one each round, so no side always
// meets a disk the one before it left busy.
void in_turn(std::size_t round, const std::vector<std::function<void()>>& sides) {
  for (std::size_t i = 0; i < sides.size(); ++i) sides[(round + i) % sides.size()]();
}

// What spank_saker.so gives a task in a step of a job with two enforced datasets, signed
// here with a throwaway key (the record copies it; nothing verifies it at save).
fs::path write_attestation(const fs::path& dir) {
  pv::Attestation a;
  a.job_id = "4242", a.step_id = "0", a.user = "bench", a.uid = 1000, a.account = "bench";
  a.partition = "all", a.zone = "here", a.nodes = "saker[1-32]", a.node = "saker1";
  a.time_unix = static_cast<std::int64_t>(std::time(nullptr));
  a.datasets = {{"records", "v3", "7", std::string(64, 'a')}, {"imagenet", "2012", "7", std::string(64, 'b')}};
  a.audit_log = "/var/log/saker/audit.log", a.audit_head = "1234:" + std::string(64, 'c');
  pv::SiteKey key;
  key.seed.fill(7);
  key.pub = pv::ed25519::public_of(key.seed);
  key.key_id = pv::key_id_of(key.pub);
  const fs::path file = dir / "job-4242.0.att";
  const std::string text = pv::format_envelope(pv::sign(a, key));
  std::FILE* f = std::fopen(file.c_str(), "w");
  if (!f || std::fwrite(text.data(), 1, text.size(), f) != text.size() || std::fclose(f) != 0) std::abort();
  return file;
}

}  // namespace

int main() {
  saker::log::set_level(saker::log::Level::warn);
  const std::size_t mib = env_size("SAKER_BENCH_CKPT_MIB", 1024);
  const std::size_t repeat = std::max<std::size_t>(1, env_size("SAKER_BENCH_REPEAT", 3));
  const char* base_env = std::getenv("SAKER_BENCH_DIR");
  const fs::path base = base_env && *base_env ? fs::path(base_env) : fs::current_path();
  const fs::path dir = base / ("bench-ckpt." + std::to_string(::getpid()));
  fs::create_directories(dir / "ckpt");
  const std::size_t bytes = mib << 20;

  // 16 float32 tensors (a model's layers), filled with non-zero, non-repeating values.
  const std::size_t n_tensors = 16, floats = bytes / 4 / n_tensors;
  std::vector<std::vector<float>> data(n_tensors, std::vector<float>(floats));
  for (std::size_t t = 0; t < n_tensors; ++t)
    for (std::size_t i = 0; i < floats; ++i) data[t][i] = static_cast<float>(i * 31 + t) * 1e-3f;
  ck::State st;
  st.config = R"({"bench": true})";
  st.lineage = {{"bench", "1"}};
  st.rng_state.resize(64);
  st.data_cursor.resize(16);
  for (std::size_t t = 0; t < n_tensors; ++t)
    st.tensors.push_back(ck::Tensor::view_of<float>("layer" + std::to_string(t) + ".weight", ck::DType::f32,
                                                    {floats / 1024, 1024}, data[t]));

  std::vector<double> raw_w, ours_w, bare_w, bare2_w, raw_r, ours_r, ours_digest_r, bare_r, copy_s, stall_s;
  ck::Options opt;
  opt.keep_last = 1;
  const char* cache_env = std::getenv("SAKER_BENCH_READ_CACHE");
  const std::string cache = cache_env && *cache_env ? cache_env : "automatic";
  if (cache == "keep") opt.read_cache = ck::ReadCache::keep;
  else if (cache == "drop") opt.read_cache = ck::ReadCache::drop;
  else if (cache != "automatic") {
    std::fprintf(stderr, "bench_ckpt: SAKER_BENCH_READ_CACHE must be automatic, keep or drop, not '%s'\n", cache.c_str());
    return 2;
  }
  const char* att_env = std::getenv("SAKER_ATTESTATION");
  if (!att_env || !*att_env) ::setenv("SAKER_ATTESTATION", write_attestation(dir).c_str(), 1);
  std::printf("bench_ckpt: %zu MiB in %zu tensors, %zu repeats, read cache %s, directory %s, attestation %s\n", mib,
              n_tensors, repeat, cache.c_str(), dir.c_str(), std::getenv("SAKER_ATTESTATION"));
  std::printf("load average before: %s\n", load_average().c_str());
  // Saves go through `ckpt`, which loaded one checkpoint first (its parent, as after a
  // resume); loads through `reader`, so the saves' record keeps that one parent.
  ck::Checkpointer ckpt(dir / "ckpt", opt);
  ck::Checkpointer reader(dir / "ckpt", opt);
  st.step = 1;
  ckpt.save(st);
  if (!ckpt.load_latest()) {
    std::fprintf(stderr, "bench_ckpt: the first checkpoint did not load\n");
    return 1;
  }
  const auto raw_save = [&] {
    settle(dir);
    raw_w.push_back(raw_write(dir / "raw.bin", data));
  };
  const auto our_save = [&](std::vector<double>& into, bool provenance) {
    settle(dir);
    ++st.step;
    ck::provenance::set_omitted_for_benchmark(!provenance);
    const auto t = Clock::now();
    ckpt.save(st);
    into.push_back(since(t));
    ck::provenance::set_omitted_for_benchmark(false);
  };
  for (std::size_t r = 0; r < repeat; ++r) {
    in_turn(r, {raw_save, [&] { our_save(ours_w, true); }, [&] { our_save(bare_w, false); },
                [&] { our_save(bare2_w, false); }});
    // Before each read: neither file cached, no writeback pending.
    const auto cold = [&] {
      evict_dir(dir);
      evict_dir(dir / "ckpt");
      settle(dir);
    };
    const auto raw_load = [&] {
      cold();
      raw_r.push_back(raw_read(dir / "raw.bin", data));
    };
    bool loaded_ok = true;
    const auto our_load = [&](std::vector<double>& into, bool provenance) {
      cold();
      ck::provenance::set_omitted_for_benchmark(!provenance);
      const auto t0 = Clock::now();
      auto loaded = reader.load_latest();
      into.push_back(since(t0));
      // The digest's thread must not run into the next measurement; its end is timed too.
      if (provenance) {
        loaded_ok = loaded_ok && !reader.parent_digests().empty();
        ours_digest_r.push_back(since(t0));
      }
      ck::provenance::set_omitted_for_benchmark(false);
      loaded_ok = loaded_ok && loaded && loaded->state.step == st.step;
    };
    in_turn(r, {[&] { our_load(ours_r, true); }, [&] { our_load(bare_r, false); }, raw_load});
    if (!loaded_ok) {
      std::fprintf(stderr, "bench_ckpt: load_latest did not return step %zu\n", static_cast<std::size_t>(st.step));
      return 1;
    }
    std::printf("  round %zu: save %.3f s (without provenance %.3f s, again %.3f s; raw %.3f s), load %.3f s "
                "(its SHA-256 taken %.3f s; without provenance %.3f s; raw %.3f s)\n",
                r + 1, ours_w.back(), bare_w.back(), bare2_w.back(), raw_w.back(), ours_r.back(), ours_digest_r.back(),
                bare_r.back(), raw_r.back());
  }

  // The record's own CPU time: what a save adds to the bytes it writes (the code identity
  // is taken once per process, at the first save, and timed here apart).
  std::vector<ck::provenance::Parent> parent{{std::string(64, 'd'), "dir-0123456789abcdef", 1, (dir / "ckpt").string()}};
  std::vector<double> record_s;
  std::size_t record_bytes = 0;
  for (int i = 0; i < 101; ++i) {
    const auto t = Clock::now();
    record_bytes = ck::provenance::encode(ck::provenance::collect(parent)).size();
    record_s.push_back(since(t));
  }

  // Async stall vs a memcpy of the state into a warm buffer. The first async save
  // allocates the snapshot arena, so it is excluded; wait() keeps the previous write
  // out of the measured stall.
  std::unique_ptr<std::byte[]> copy(new std::byte[bytes]);
  std::memset(copy.get(), 1, bytes);
  st.step = 1000000;
  ckpt.save_async(st).wait();
  for (std::size_t r = 0; r < repeat; ++r) {
    auto t0 = Clock::now();
    std::size_t off = 0;
    for (const auto& t : data) {
      std::memcpy(copy.get() + off, t.data(), t.size() * 4);
      off += t.size() * 4;
    }
    copy_s.push_back(since(t0));
    ckpt.wait();
    st.step = 1000001 + r;
    stall_s.push_back(ckpt.save_async(st).stall_s());
  }
  ckpt.wait();

  const double gib = static_cast<double>(bytes) / (1u << 30);
  const double w_raw = median(raw_w), w_ours = median(ours_w), r_raw = median(raw_r), r_ours = median(ours_r);
  const double c = median(copy_s), s = median(stall_s);
  const double gb = gib * 1.073741824;
  std::printf("save:  saker %.2f GB/s (%s), raw fwrite+fsync %.2f GB/s (%s): ratio %.2fx (target >= 0.9x)\n",
              gb / w_ours, spread(ours_w, gb).c_str(), gb / w_raw, spread(raw_w, gb).c_str(), w_raw / w_ours);
  // Each round's two loads run back to back, so the median of per-round ratios is less
  // moved by the machine's load drifting between rounds than the ratio of medians.
  std::vector<double> paired;
  for (std::size_t i = 0; i < raw_r.size(); ++i) paired.push_back(raw_r[i] / ours_r[i]);
  std::printf("load:  saker %.2f GB/s (%s, verified), raw read %.2f GB/s (%s): ratio %.2fx (target >= 0.9x; "
              "per-round ratios: median %.2fx)\n",
              gb / r_ours, spread(ours_r, gb).c_str(), gb / r_raw, spread(raw_r, gb).c_str(), r_raw / r_ours,
              median(paired));
  std::printf("async: stall %.1f ms, memcpy %.1f ms: ratio %.2fx (target <= 1.5x)\n", s * 1e3, c * 1e3, s / c);
  std::printf("provenance: save with / without %s (target <= 1.01x); noise floor, without / without %s\n",
              ratios(ours_w, bare_w).c_str(), ratios(bare2_w, bare_w).c_str());
  std::printf("provenance: load with / without (to the load's return; the parent's SHA-256 on a thread after) %s\n",
              ratios(ours_r, bare_r).c_str());
  std::printf("provenance: load with, to its SHA-256's end / without %s\n", ratios(ours_digest_r, bare_r).c_str());
  std::printf("provenance: the record alone (collect + encode, %zu bytes) %.1f us per save, %.3f%% of the median save "
              "without provenance (%.3f s)\n",
              record_bytes, median(record_s) * 1e6, 100 * median(record_s) / median(bare_w), median(bare_w));
  std::printf("load average after: %s\n", load_average().c_str());
  std::error_code ec;
  fs::remove_all(dir, ec);
  return 0;
}
