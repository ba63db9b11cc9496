// Checkpointer: validation, the residency guard, synchronous and asynchronous saves, the
// sharded commit protocol, and load with fallback.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <typeinfo>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "ckpt/commit.hpp"
#include "ckpt/crypto.hpp"
#include "ckpt/format.hpp"
#include "ckpt/load.hpp"
#include "ckpt/manifest.hpp"
#include "common/hash.hpp"
#include "ckpt/partition.hpp"
#include "ckpt/pinned_dir.hpp"
#include "ckpt/provenance.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "config.h"
#include "saker/ckpt.hpp"

namespace saker::ckpt {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string mib(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 255 || name == "." || name == "..") return false;
  for (unsigned char c : name)
    if (!(std::isalnum(c) || c == '_' || c == '.' || c == ':' || c == '-')) return false;
  return true;
}

void validate(const State& st) {
  if (st.world_size == 0 || st.rank >= st.world_size)
    throw Error(explain("cannot save rank " + std::to_string(st.rank) + " of world size " + std::to_string(st.world_size),
                        "the rank must be below the world size", "set State::rank and State::world_size"));
  std::set<std::string> seen;
  for (const Tensor& t : st.tensors) {
    if (!valid_name(t.name))
      throw Error(explain("bad tensor name '" + t.name + "'", "names use only letters, digits and _ . : -",
                          "rename it, e.g. layer1.weight"));
    if (!seen.insert(t.name).second)
      throw Error(explain("tensor " + t.name + " appears twice", "names must be unique", "rename one of them"));
    if (t.bytes.size() != t.element_count() * dtype_size(t.dtype))
      throw Error(explain("tensor " + t.name + " has " + std::to_string(t.bytes.size()) + " bytes",
                          "its dtype " + std::string(dtype_name(t.dtype)) + " and shape need " +
                              std::to_string(t.element_count() * dtype_size(t.dtype)),
                          "pass the tensor's full bytes"));
    if (t.placement == Placement::partitioned) slice_for(t, st.rank, st.world_size);
  }
}

// What this rank writes: rank 0 writes replicated and partitioned tensors, the others
// only their partitioned slices (rank 0 alone writes replicated state).
std::vector<const Tensor*> tensors_to_write(const State& st) {
  std::vector<const Tensor*> out;
  for (const Tensor& t : st.tensors)
    if (st.rank == 0 || t.placement == Placement::partitioned) out.push_back(&t);
  return out;
}

std::string default_run_id(const fs::path& dir, const Options& options) {
  if (!options.run_id.empty()) return options.run_id;
  std::error_code ec;
  const fs::path canon = fs::weakly_canonical(dir, ec);
  const std::string text = "saker-ckpt run in " + (ec ? dir : canon).string();
  return "dir-" + hash::xxh3_128(text.data(), text.size()).hex().substr(0, 16);
}

// Errors name the directory the user gave, not /proc/self/fd/N.
[[noreturn]] void rethrow_named(const PinnedDir& p, const fs::path& shown) {
  try {
    throw;
  } catch (const Error& e) {
    if (typeid(e) != typeid(Error)) throw;
    std::string what = e.what();
    const std::string from = p.via.string(), to = shown.string();
    for (std::size_t at = what.find(from); at != std::string::npos; at = what.find(from, at + to.size()))
      what.replace(at, from.size(), to);
    throw Error(what);
  }
}

}  // namespace

// ---------------------------------------------------------------- async jobs

struct SaveJob {
  std::mutex mutex;
  std::condition_variable cv;
  bool finished = false;
  SaveReport report;
  std::exception_ptr error;
  double stall_s = 0;
};

bool SaveHandle::done() const {
  if (!job_) return true;
  std::lock_guard lock(job_->mutex);
  return job_->finished;
}

SaveReport SaveHandle::wait() const {
  if (!job_) throw Error("saker-ckpt: SaveHandle::wait on an empty handle (no save was started)");
  std::unique_lock lock(job_->mutex);
  job_->cv.wait(lock, [&] { return job_->finished; });
  if (job_->error) std::rethrow_exception(job_->error);
  return job_->report;
}

double SaveHandle::stall_s() const { return job_ ? job_->stall_s : 0; }

struct Checkpointer::Impl {
  std::optional<crypto::Key> key;
  std::shared_ptr<SaveJob> job;  // the save in flight, if any
  std::thread writer;
  // Snapshot memory, reused from one async save to the next so the stall is a memcpy into
  // warm pages rather than a fresh allocation.
  std::unique_ptr<std::byte[]> arena;
  std::size_t arena_size = 0;
  State snapshot;
  std::vector<std::string> rejected;  // by the last load_latest
  // Every checkpoint this Checkpointer loaded: the parents in the provenance of what it
  // saves from then on (ckpt/provenance.hpp). Only rank 0 records them (it writes the record).
  // Named by the SHA-256 the load took of the bytes it read (one pass, the same descriptor:
  // a file swapped after the load cannot become the parent). Only when that pass could not
  // give it (a read failed), the file is hashed by name at the next save (on the writer
  // thread for save_async): a resume must not read the whole checkpoint twice before training.
  std::vector<provenance::Parent> parents;
  std::vector<std::pair<provenance::Parent, bool>> unhashed;  // (parent without digest, drop its pages)
  LoadReport load(const fs::path& file, std::uint32_t rank, std::uint32_t world_size, bool drop,
                  std::optional<std::string>* sha);
  void note_parent(const LoadReport& r, std::uint32_t rank, bool drop, const std::optional<std::string>& sha);
  void add_parent(const provenance::Parent& p);
  const std::vector<provenance::Parent>& hashed_parents();

  // Writes through `dir` (a pinned directory's /proc/self/fd/N); `shown` names it in reports.
  SaveReport write(const fs::path& dir, const fs::path& shown, const Options& options, const State& st);
  void wait_for_shards(const fs::path& dir, const Options& options, const State& st);
  void join() {
    if (writer.joinable()) writer.join();
  }
};

Checkpointer::Checkpointer(fs::path dir, Options options)
    : dir_(std::move(dir)), options_(std::move(options)), impl_(std::make_unique<Impl>()) {
  commit::make_directories(dir_, directory_mode(options_.access));
  std::error_code ec;
  if (!fs::is_directory(dir_, ec))
    throw Error(explain("checkpoint directory " + dir_.string() + " cannot be created", "not a directory",
                        "check the path and permissions"));
  if (!options_.key_file.empty()) impl_->key = crypto::load_key(options_.key_file);
  commit::remove_stale_temps(dir_, options_.stale_temp_age);
}

Checkpointer::~Checkpointer() {
  try {
    wait();
  } catch (const std::exception& e) {
    log::error(std::string("ckpt: the last asynchronous save failed: ") + e.what());
  }
}

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

void check_destination(const DestinationGuard& guard, const fs::path& dir, const std::vector<DatasetVersion>& lineage,
                       bool encrypted, std::optional<std::uint64_t> step) {
  const std::string refusing = "saker-ckpt: refusing to save " +
                               (step ? "step " + std::to_string(*step) : std::string("checkpoints"));
  try {
    guard.check(dir, lineage);
  } catch (const std::exception& e) {
    throw DestinationRefused(refusing + " to " + dir.string() + ": " + e.what());
  }
  bool required = true;  // fail closed: a guard that cannot decide requires encryption
  try {
    required = guard.require_encryption(lineage);
  } catch (const std::exception& e) {
    log::warn(std::string("ckpt: the policy could not decide whether encryption is required (") + e.what() +
              "); requiring it");
  }
  if (required && !encrypted)
    throw DestinationRefused(explain(refusing + " unencrypted to " + dir.string(),
                                     "the policy requires encryption for a model trained on " + format_lineage(lineage),
                                     "give a 0600 key file (Options::key_file; saker-train --ckpt-key)"));
}

void Checkpointer::check_destination(const State& state) const {
  if (!options_.guard) return;
  const auto pinned = pin_directory(dir_);
  ckpt::check_destination(*options_.guard, pinned->real, state.lineage, impl_->key.has_value(), state.step);
  confirm_pinned(*pinned, dir_);
}

SaveReport Checkpointer::save(const State& state) {
  const auto t0 = Clock::now();
  validate(state);
  const auto pinned = pin_and_check(dir_, options_, state, impl_->key.has_value());
  wait();
  SaveReport report;
  try {
    report = impl_->write(pinned->via, dir_, options_, state);
  } catch (...) {
    rethrow_named(*pinned, dir_);
  }
  report.stall_s = seconds_since(t0);
  return report;
}

SaveHandle Checkpointer::save_async(const State& state) {
  const auto t0 = Clock::now();
  validate(state);
  // A refusal is the caller's at once, as before; a directory that cannot be opened fails
  // the background write (reported by wait()), as it did when the writer opened files by name.
  std::shared_ptr<PinnedDir> pinned;
  std::exception_ptr pin_error;
  try {
    pinned = pin_and_check(dir_, options_, state, impl_->key.has_value());
  } catch (const DestinationRefused&) {
    throw;
  } catch (...) {
    pin_error = std::current_exception();
  }
  const auto wait_start = Clock::now();
  try {
    wait();
  } catch (const std::exception& e) {
    // The previous save's handle carries its error too; this save goes ahead.
    log::error(std::string("ckpt: the previous asynchronous save failed: ") + e.what());
  }
  const double waited = seconds_since(wait_start);

  // Snapshot: copy what this rank writes into the arena; the copy's tensors view it.
  const auto to_write = tensors_to_write(state);
  std::size_t total = state.rng_state.size() + state.data_cursor.size();
  for (const Tensor* t : to_write) total += t->bytes.size();
  if (impl_->arena_size < total) {
    impl_->arena.reset();
    impl_->arena.reset(new std::byte[total]);
    impl_->arena_size = total;
  }
  State& snap = impl_->snapshot;
  snap.step = state.step;
  snap.epoch = state.epoch;
  snap.world_size = state.world_size;
  snap.rank = state.rank;
  snap.run_id = state.run_id;
  snap.config = state.config;
  snap.lineage = state.lineage;
  snap.tensors.clear();
  std::byte* p = impl_->arena.get();
  for (const Tensor* t : to_write) {
    if (!t->bytes.empty()) std::memcpy(p, t->bytes.data(), t->bytes.size());
    Tensor copy = *t;
    copy.bytes = {p, t->bytes.size()};
    copy.storage.reset();
    snap.tensors.push_back(std::move(copy));
    p += t->bytes.size();
  }
  snap.rng_state = state.rng_state;
  snap.data_cursor = state.data_cursor;

  auto job = std::make_shared<SaveJob>();
  job->stall_s = seconds_since(t0);
  log::info("ckpt: step " + std::to_string(state.step) + ": training stalled " +
            std::to_string(static_cast<long long>(job->stall_s * 1e3 + 0.5)) + " ms (" +
            std::to_string(static_cast<long long>(waited * 1e3 + 0.5)) + " ms waiting for the previous save, snapshot of " +
            mib(total) + ")");
  impl_->job = job;
  impl_->writer = std::thread([this, job, pinned = std::move(pinned), pin_error] {
    SaveReport report;
    std::exception_ptr error;
    try {
      if (pin_error) std::rethrow_exception(pin_error);
      try {
        report = impl_->write(pinned->via, dir_, options_, impl_->snapshot);
      } catch (...) {
        rethrow_named(*pinned, dir_);
      }
      report.stall_s = job->stall_s;
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard lock(job->mutex);
    job->report = report;
    job->error = error;
    job->finished = true;
    job->cv.notify_all();
  });
  return SaveHandle(job);
}

std::optional<SaveReport> Checkpointer::wait() {
  if (!impl_->job) return std::nullopt;
  impl_->join();
  auto job = std::move(impl_->job);
  impl_->job.reset();
  return SaveHandle(job).wait();
}

LoadReport Checkpointer::Impl::load(const fs::path& file, std::uint32_t rank, std::uint32_t world_size, bool drop,
                                    std::optional<std::string>* sha) {
  // Only rank 0 writes the provenance record, so only it takes the digest.
  const bool digest = rank == 0 && !provenance::omitted_for_benchmark();
  return load_checkpoint(file, rank, world_size, key ? &*key : nullptr, drop, false, {}, digest ? sha : nullptr);
}

void Checkpointer::Impl::note_parent(const LoadReport& r, std::uint32_t rank, bool drop, const std::optional<std::string>& sha) {
  if (rank != 0 || provenance::omitted_for_benchmark()) return;
  provenance::Parent p{sha.value_or(""), r.state.run_id, r.state.step, r.file.string()};
  if (sha) add_parent(p);
  else unhashed.push_back({p, drop});
}

void Checkpointer::Impl::add_parent(const provenance::Parent& p) {
  for (const auto& q : parents)
    if (q.sha256 == p.sha256) return;
  parents.push_back(p);
}

const std::vector<provenance::Parent>& Checkpointer::Impl::hashed_parents() {
  for (auto& [p, drop] : unhashed) {
    try {
      p.sha256 = provenance::file_sha256(p.file, drop);
      add_parent(p);
    } catch (const std::exception& e) {
      log::warn("ckpt: the checkpoint loaded from " + p.file + " cannot be hashed, so later checkpoints do not name it " +
                "as their parent: " + e.what());
    }
  }
  unhashed.clear();
  return parents;
}

LoadReport Checkpointer::load(const fs::path& file, std::uint32_t rank, std::uint32_t world_size) {
  wait();
  const bool drop = drop_read_cache(options_.read_cache, world_size);
  std::optional<std::string> sha;
  LoadReport r = impl_->load(file, rank, world_size, drop, &sha);
  impl_->note_parent(r, rank, drop, sha);
  return r;
}

std::optional<LoadReport> Checkpointer::load_latest(std::uint32_t rank, std::uint32_t world_size) {
  return load_latest(rank, world_size, Accept{});
}

std::optional<LoadReport> Checkpointer::load_latest(std::uint32_t rank, std::uint32_t world_size, const Accept& accept) {
  wait();
  std::vector<std::string>& rejected = impl_->rejected;
  rejected.clear();
  auto files = list_checkpoints(dir_);
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    try {
      const bool drop = drop_read_cache(options_.read_cache, world_size);
      std::optional<std::string> sha;
      LoadReport r = impl_->load(*it, rank, world_size, drop, &sha);
      if (accept) accept(r);  // a checkpoint the caller refuses is no parent
      impl_->note_parent(r, rank, drop, sha);
      r.rejected = rejected;
      log::info("ckpt: loaded " + it->string() + " (step " + std::to_string(r.state.step) +
                (r.resharded ? ", resharded from world size " + std::to_string(r.saved_world_size) : std::string()) + ")");
      return r;
    } catch (const KeyError&) {
      throw;  // every older checkpoint has the same key problem; falling back would lose progress
    } catch (const std::exception& e) {
      // Messages start with the file they are about; name it once.
      const std::string why = e.what();
      const std::string line = why.rfind(it->string(), 0) == 0 ? why : it->string() + ": " + why;
      log::warn("ckpt: skipping damaged checkpoint " + line);
      rejected.push_back(line);
    }
  }
  if (!rejected.empty())
    log::warn("ckpt: no intact checkpoint in " + dir_.string() + " (" + std::to_string(rejected.size()) + " damaged)");
  return std::nullopt;
}

const std::vector<std::string>& Checkpointer::last_rejected() const { return impl_->rejected; }

std::vector<fs::path> Checkpointer::prune() {
  wait();
  return ckpt::prune(dir_, options_.keep_last, options_.keep_every);
}

}  // namespace saker::ckpt
