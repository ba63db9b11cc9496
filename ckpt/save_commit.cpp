// One rank's checkpoint file and the sharded commit protocol: every rank writes and
// seals its own file; rank 0 waits for the others (the caller's barrier, or their
// committed shard files), binds each shard by its manifest's checksum, then publishes
// the main file, points "latest" at it and prunes.
#include <ctime>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ckpt/checkpointer_impl.hpp"
#include "ckpt/commit.hpp"
#include "ckpt/format.hpp"
#include "ckpt/manifest.hpp"
#include "common/error.hpp"
#include "common/hash.hpp"
#include "config.h"

namespace saker::ckpt {
using internal::Clock;
using internal::seconds_since;
using internal::tensors_to_write;

namespace {

std::string default_run_id(const fs::path& dir, const Options& options) {
  if (!options.run_id.empty()) return options.run_id;
  std::error_code ec;
  const fs::path canon = fs::weakly_canonical(dir, ec);
  const std::string text = "saker-ckpt run in " + (ec ? dir : canon).string();
  return "dir-" + hash::xxh3_128(text.data(), text.size()).hex().substr(0, 16);
}

}  // namespace

void Checkpointer::Impl::wait_for_shards(const fs::path& dir, const Options& options, const State& st) {
  const auto deadline = Clock::now() + options.shard_timeout;
  for (;;) {
    std::vector<std::uint32_t> missing;
    for (std::uint32_t r = 1; r < st.world_size; ++r)
      if (!fs::exists(dir / format::shard_file_name(st.step, r))) missing.push_back(r);
    if (missing.empty()) return;
    if (Clock::now() > deadline) {
      std::string ranks;
      for (auto r : missing) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
      throw Error(explain("checkpoint step " + std::to_string(st.step) + " not committed",
                          "rank(s) " + ranks + " did not write their shard file within " +
                              std::to_string(options.shard_timeout.count()) + " s (host unknown to rank 0; see the job's task layout)",
                          "check those ranks' logs; the previous checkpoint stays the latest"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

SaveReport Checkpointer::Impl::write(const fs::path& dir, const fs::path& shown, const Options& options, const State& st) {
  const auto t0 = Clock::now();
  format::FileMeta meta;
  meta.run_id = st.run_id.empty() ? default_run_id(shown, options) : st.run_id;
  meta.step = st.step;
  meta.epoch = st.epoch;
  meta.world_size = st.world_size;
  meta.created_unix = static_cast<std::int64_t>(std::time(nullptr));
  meta.saker_version = PACKAGE_VERSION;
  meta.config = st.config;
  meta.lineage = st.lineage;
  if (st.rank == 0 && !provenance::omitted_for_benchmark())
    meta.provenance = provenance::encode(provenance::collect(hashed_parents()));
  if (key) {
    meta.encryption = crypto::kCipherName;
    meta.key_id = key->id;
  }
  format::ShardOut shard;
  shard.rank = st.rank;
  for (const Tensor* t : tensors_to_write(st)) shard.tensors.push_back(*t);
  shard.rng_state = st.rng_state;
  shard.data_cursor = st.data_cursor;
  std::vector<std::pair<std::uint32_t, std::string>> linked;
  if (st.rank == 0)
    for (std::uint32_t r = 1; r < st.world_size; ++r) linked.emplace_back(r, format::shard_file_name(st.step, r));

  const fs::path final_path = dir / (st.rank == 0 ? format::main_file_name(st.step) : format::shard_file_name(st.step, st.rank));
  const fs::path temp = commit::temp_path_for(final_path);
  SaveReport report;
  report.step = st.step;
  report.file = shown / final_path.filename();
  bool ok = false;
  manifest::Manifest m;
  try {
    commit::create_private(temp, file_mode(options.access));  // HDF5 then truncates it: the mode stays
    m = format::write_file(temp, meta, shard, linked, key ? &*key : nullptr);
    report.bytes = format::tensor_bytes(m);
    if (st.rank != 0) {
      manifest::seal(temp, m, key ? &*key : nullptr);
      commit::publish(temp, final_path);  // rank 0 seals and publishes after the barrier
    }
    ok = true;
  } catch (...) {
    std::error_code ec;
    fs::remove(temp, ec);
    if (st.world_size > 1 && options.barrier) options.barrier(false);
    throw;
  }
  if (st.world_size > 1) {
    bool all_ok = true;
    if (options.barrier) {
      all_ok = options.barrier(ok);
    } else if (st.rank == 0) {
      try {
        wait_for_shards(dir, options, st);
      } catch (...) {
        std::error_code ec;
        fs::remove(temp, ec);
        throw;
      }
    }
    if (!all_ok) {
      std::error_code ec;
      if (st.rank == 0) fs::remove(temp, ec);
      throw Error(explain("checkpoint step " + std::to_string(st.step) + " not committed",
                          "another rank failed to write its shard", "see that rank's log; the previous checkpoint stays the latest"));
    }
  }
  if (st.rank == 0) {
    try {
      // The main file's manifest binds every shard file by its manifest's checksum.
      for (std::uint32_t r = 1; r < st.world_size; ++r) {
        const std::string name = format::shard_file_name(st.step, r);
        m.shards.push_back({r, name, format::open_shard(dir / name, m, r).manifest_xxh3});
      }
      manifest::seal(temp, m, key ? &*key : nullptr);
    } catch (...) {
      std::error_code ec;
      fs::remove(temp, ec);
      throw;
    }
    commit::publish(temp, final_path);
    commit::write_latest(dir, final_path.filename().string(), file_mode(options.access));
    report.committed = true;
    ckpt::prune(dir, options.keep_last, options.keep_every);
  }
  report.write_s = seconds_since(t0);
  return report;
}

}  // namespace saker::ckpt
