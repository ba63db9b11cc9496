// Checkpointer: construction (the directory made, the key read, stale temporary files
// removed), the synchronous save, and loads with fallback, each loaded checkpoint
// remembered as a parent for the provenance of what is saved next. The asynchronous save,
// the commit protocol and the checks on a state are in save_async.cpp, save_commit.cpp
// and save_checks.cpp (checkpointer_impl.hpp).
#include <string>
#include <utility>
#include <vector>

#include "ckpt/checkpointer_impl.hpp"
#include "ckpt/commit.hpp"
#include "ckpt/load.hpp"
#include "common/error.hpp"
#include "common/log.hpp"

namespace saker::ckpt {

double internal::seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

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

SaveReport Checkpointer::save(const State& state) {
  const auto t0 = internal::Clock::now();
  internal::validate(state);
  const auto pinned = pin_and_check(dir_, options_, state, impl_->key.has_value());
  wait();
  SaveReport report;
  try {
    report = impl_->write(pinned->via, dir_, options_, state);
  } catch (...) {
    internal::rethrow_named(*pinned, dir_);
  }
  report.stall_s = internal::seconds_since(t0);
  return report;
}

LoadReport Checkpointer::Impl::load(const fs::path& file, std::uint32_t rank, std::uint32_t world_size, bool drop,
                                    std::unique_ptr<ParentDigest>* digest) {
  // Only rank 0 writes the provenance record, so only it takes the digest.
  const bool take = rank == 0 && !provenance::omitted_for_benchmark();
  return load_checkpoint(file, rank, world_size, key ? &*key : nullptr, drop, false, {}, take ? digest : nullptr);
}

void Checkpointer::Impl::note_parent(const LoadReport& r, std::uint32_t rank, std::unique_ptr<ParentDigest> digest) {
  if (rank != 0 || !digest) return;
  pending.emplace_back(provenance::Parent{"", r.state.run_id, r.state.step, r.file.string()}, std::move(digest));
}

void Checkpointer::Impl::add_parent(const provenance::Parent& p) {
  for (const auto& q : parents)
    if (q.sha256 == p.sha256) return;
  parents.push_back(p);
}

const std::vector<provenance::Parent>& Checkpointer::Impl::hashed_parents() {
  for (auto& [p, digest] : pending) {
    std::string why;
    if (auto sha = digest->result(&why)) {
      p.sha256 = *sha;
      add_parent(p);
    } else {
      // Never hashed again by name: that could be another file than the one loaded.
      log::warn("ckpt: the checkpoint loaded from " + p.file + " has no SHA-256, so later checkpoints do not name it " +
                "as their parent: " + why);
    }
  }
  pending.clear();
  return parents;
}

LoadReport Checkpointer::load(const fs::path& file, std::uint32_t rank, std::uint32_t world_size) {
  wait();
  const bool drop = drop_read_cache(options_.read_cache, world_size);
  std::unique_ptr<ParentDigest> digest;
  LoadReport r = impl_->load(file, rank, world_size, drop, &digest);
  impl_->note_parent(r, rank, std::move(digest));
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
      std::unique_ptr<ParentDigest> digest;
      LoadReport r = impl_->load(*it, rank, world_size, drop, &digest);
      if (accept) accept(r);  // a checkpoint the caller refuses is no parent (its digest stops here)
      impl_->note_parent(r, rank, std::move(digest));
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

std::vector<std::string> Checkpointer::parent_digests() {
  wait();  // an asynchronous save's writer may be joining them
  std::vector<std::string> out;
  for (const auto& p : impl_->hashed_parents()) out.push_back(p.sha256);
  return out;
}

const std::vector<std::string>& Checkpointer::last_rejected() const { return impl_->rejected; }

std::vector<fs::path> Checkpointer::prune() {
  wait();
  return ckpt::prune(dir_, options_.keep_last, options_.keep_every);
}

}  // namespace saker::ckpt
