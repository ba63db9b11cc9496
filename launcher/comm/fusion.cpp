// The fusion engine's thread and its callers' side: enqueue, join, the paced loop of
// negotiation cycles (fusion_cycle.cpp) and failing what is pending when it stops.
#include "launcher/comm/fusion.hpp"

#include <algorithm>

#include "common/error.hpp"
#include "common/log.hpp"

namespace saker::comm {

FusionEngine::FusionEngine(Communicator::Impl& comm) : comm_(comm) {
  thread_ = std::thread([this] { loop(); });
}

FusionEngine::~FusionEngine() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    woken_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

Handle FusionEngine::enqueue(const std::string& name, void* data, std::size_t count, DataType type, ReduceOp op,
                             const std::vector<std::int64_t>& shape) {
  if (name.empty() || name.find_first_of("\n\x1f") != std::string::npos)
    throw Error(explain("invalid tensor name '" + name + "'", "names must be non-empty, without newlines",
                        "rename the tensor"));
  std::string shape_text;
  std::size_t elements = 1;
  for (std::int64_t d : shape) {
    if (d < 0 || (d > 0 && elements > SIZE_MAX / static_cast<std::size_t>(d)))
      throw Error(explain("tensor '" + name + "': dimension " + std::to_string(d) + " of its shape", "dimensions are sizes",
                          "pass the tensor's own shape"));
    elements *= static_cast<std::size_t>(d);
    shape_text += (shape_text.empty() ? "" : ",") + std::to_string(d);
  }
  if (!shape.empty() && (elements != count || shape_text.size() > fusion_wire::kMaxShapeText))
    throw Error(explain("tensor '" + name + "': its shape holds " + std::to_string(elements) + " elements, not " +
                            std::to_string(count),
                        "the shape must describe the count given (and fit in 256 characters)", "pass the tensor's own shape"));
  auto state = std::make_shared<Handle::State>();
  state->what = "allreduce of tensor '" + name + "'";
  state->limit = comm_.options.stall_abort + comm_.options.timeout * 4 + std::chrono::seconds(10);
  std::lock_guard lock(mu_);
  if (finished_) throw Error("saker: enqueue_allreduce('" + name + "') after the fusion thread stopped");
  if (!pending_.emplace(name, Entry{data, count, type, op, state, shape_text}).second)
    throw Error(explain("tensor '" + name + "' is already queued", "a name may be pending only once",
                        "wait for its handle before submitting it again"));
  order_.push_back(name);
  woken_ = true;
  wake_.notify_one();
  comm_.timeline->instant("enqueue " + name, "enqueue", kTidFusion, "{\"bytes\":" + std::to_string(count * size_of(type)) + "}");
  return Handle(state);
}

int FusionEngine::join() {
  auto state = std::make_shared<Handle::State>();
  state->what = "join()";
  // Peers may train for a long time before they join; a dead peer fails the fusion
  // thread's own collectives (bounded by the timeout), which fails this wait too.
  state->limit = std::chrono::hours(24 * 30);
  auto result = std::make_shared<int>(-1);
  {
    std::lock_guard lock(mu_);
    if (finished_) throw Error("saker: join() after the fusion thread stopped");
    if (join_state_)
      throw Error(explain("join() is already waiting on this rank", "a rank joins once per round",
                          "call join() from one thread, once, after the rank's last step"));
    join_state_ = state;
    join_result_ = result;
    woken_ = true;
  }
  wake_.notify_one();
  Handle(state).wait();
  return *result;  // written before the state finished (under its mutex)
}

void FusionEngine::track_joins(const std::vector<bool>& joined) {
  if (seen_joined_.size() != joined.size()) seen_joined_.assign(joined.size(), false);
  for (std::size_t r = 0; r < joined.size(); ++r)
    if (joined[r] && !seen_joined_[r]) {
      seen_joined_[r] = true;
      join_last_ = static_cast<int>(r);  // ascending: the highest rank of this cycle wins
    }
  if (std::find(joined.begin(), joined.end(), false) != joined.end()) return;
  std::lock_guard lock(mu_);
  seen_joined_.assign(joined.size(), false);  // a new round may start (the next epoch)
  if (join_state_) {
    *join_result_ = join_last_;
    join_state_->finish();
  }
  join_state_.reset();
}

void FusionEngine::fail_all(std::exception_ptr e) {
  std::lock_guard lock(mu_);
  if (join_state_) join_state_->finish(e);
  join_state_.reset();
  for (auto& [name, entry] : pending_) entry.state->finish(e);
  pending_.clear();
  order_.clear();
  finished_ = true;
}

void FusionEngine::loop() {
  try {
    // Every cycle is a collective (two allgathers). While no rank has anything
    // pending the pause doubles up to kIdleCap, so an idle fusion thread does not tax
    // the user's own collectives with wake-ups every fusion_cycle; a local enqueue
    // ends the pause at once (peers join as their own enqueue wakes them, or when
    // their pause ends).
    //
    // After a partial cycle (a name some ranks submitted and others not yet) the pause
    // starts at kPartialFirst and doubles up to fusion_cycle. A late rank's enqueue
    // wakes only its own fusion thread, and its cycle then waits for the early ranks'
    // threads: with a whole fusion_cycle there, a rank behind by microseconds (its timer
    // cycle came just before its enqueue) made the tensor wait up to 2 ms. The doubling
    // keeps a rank that is far behind from costing more than a few extra cycles.
    constexpr auto kIdleCap = std::chrono::milliseconds(50);
    constexpr auto kPartialFirst = std::chrono::microseconds(100);
    const std::chrono::microseconds cycle_time = comm_.options.fusion_cycle;
    std::chrono::microseconds pause = cycle_time;
    bool was_partial = false;
    while (!finished_) {
      const Outcome outcome = cycle();
      if (finished_) break;
      const auto was = pause;
      switch (outcome) {
        case Outcome::idle:
          pause = std::min(std::max(was * 2, cycle_time), std::max<std::chrono::microseconds>(kIdleCap, cycle_time));
          break;
        case Outcome::partial:
          pause = was_partial ? std::min(was * 2, cycle_time) : std::min<std::chrono::microseconds>(kPartialFirst, cycle_time);
          break;
        case Outcome::settled:
          pause = cycle_time;
          break;
      }
      was_partial = outcome == Outcome::partial;
      std::unique_lock lock(mu_);
      wake_.wait_for(lock, pause, [&] { return woken_; });
      woken_ = false;
    }
  } catch (...) {
    log::error(std::string("comm: fusion thread stopped: ") + [] {
      try { throw; } catch (const std::exception& e) { return e.what(); } catch (...) { return "unknown error"; }
    }());
    fail_all(std::current_exception());
  }
}

}  // namespace saker::comm
