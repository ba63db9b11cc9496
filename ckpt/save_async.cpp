// save_async(): the caller stalls only for a copy of what this rank writes into warm
// memory (the arena, reused from one save to the next); a writer thread writes and commits
// it, and the SaveHandle reports the result. At most one save is in flight.
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "ckpt/checkpointer_impl.hpp"
#include "common/error.hpp"
#include "common/log.hpp"

namespace saker::ckpt {
using internal::Clock;
using internal::seconds_since;

namespace {

std::string mib(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

}  // namespace

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

SaveHandle Checkpointer::save_async(const State& state) {
  const auto t0 = Clock::now();
  internal::validate(state);
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
  const auto to_write = internal::tensors_to_write(state);
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
        internal::rethrow_named(*pinned, dir_);
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

}  // namespace saker::ckpt
