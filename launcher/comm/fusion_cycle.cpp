// One negotiation cycle of the fusion thread, in named steps: what this rank has
// pending, every rank's list, the names ready everywhere, and the stall report for the
// rest (the fused reduction of the ready ones is in fusion_reduce.cpp).
#include "launcher/comm/fusion.hpp"

#include <algorithm>
#include <deque>
#include <set>

#include "common/error.hpp"
#include "common/log.hpp"
#include "launcher/comm/reduce.hpp"

namespace saker::comm {

namespace {
using fusion_wire::RankList;
using fusion_wire::Spec;
}  // namespace

// One negotiation cycle, in named steps: what this rank has pending; every rank's list;
// which names are ready everywhere (refusing those the ranks disagree on); their fused
// reduction; the stall report for the rest.
FusionEngine::Outcome FusionEngine::cycle() {
  Pending mine = snapshot();
  auto t0 = Timeline::Clock::now();
  std::vector<RankList> lists = negotiate(mine);
  std::vector<bool> joined;
  bool all_stop = true, any_pending = false;
  for (const RankList& l : lists) {
    all_stop = all_stop && l.stop;
    any_pending = any_pending || !l.items.empty();
    joined.push_back(l.joined);
  }
  const bool any_joined = std::find(joined.begin(), joined.end(), true) != joined.end();
  if (any_pending) comm_.timeline->span("negotiate", "fuse", kTidFusion, t0, Timeline::Clock::now());
  if (all_stop) {
    fail_all(std::make_exception_ptr(Error("saker: the communicator was destroyed before this tensor was reduced")));
    return Outcome::settled;
  }
  std::set<std::string> everywhere;
  std::deque<std::vector<char>> stand_ins;  // a joined rank's identity buffers, alive until reduced
  reduce_ready(take_ready(lists, joined, any_joined, everywhere, stand_ins));
  if (any_joined) track_joins(joined);
  const bool stalled = report_stalls(lists, joined, everywhere);
  if (!any_pending && !any_joined) return Outcome::idle;  // a joined rank's peers must not wait out an idle pause
  return stalled ? Outcome::partial : Outcome::settled;
}

FusionEngine::Pending FusionEngine::snapshot() {
  Pending p;
  std::lock_guard lock(mu_);
  p.stop = stop_;
  p.joining = join_state_ != nullptr;
  for (const auto& name : order_) {
    const Entry& e = pending_.at(name);
    p.items.emplace_back(name, Spec{e.count, static_cast<int>(e.type), static_cast<int>(e.op), e.shape});
  }
  return p;
}

// Every rank learns every rank's pending list (two allgathers: the lengths, then the
// lists padded to the longest).
std::vector<RankList> FusionEngine::negotiate(const Pending& mine) {
  Core& core = *comm_.fusion;
  const int n = comm_.where.size;
  // A stall abort must fail the same tensors on every rank in the same cycle, but each
  // rank's stall clock starts when it first sees the gap: so a rank only flags names
  // whose stall has lasted stall_abort here, and every rank aborts what any rank flags.
  std::set<std::string> expired;
  if (comm_.options.stall_abort.count() > 0) {
    const auto now = std::chrono::steady_clock::now();
    for (const auto& [name, since] : partial_since_)
      if (now - since >= comm_.options.stall_abort) expired.insert(name);
  }
  std::string text = fusion_wire::encode(mine.stop, mine.joining, mine.items, expired);
  std::uint64_t len = text.size();
  std::vector<std::uint64_t> lens(static_cast<std::size_t>(n));
  core.allgather(&len, lens.data(), sizeof len);
  const std::size_t width = fusion_wire::checked_width(lens, [&](int r) { return comm_.mesh->who(r); });
  text.resize(width, '\0');
  std::vector<char> all(width * static_cast<std::size_t>(n));
  core.allgather(text.data(), all.data(), width);
  std::vector<RankList> lists;
  for (int r = 0; r < n; ++r)
    lists.push_back(fusion_wire::decode(
        std::string_view(all.data() + static_cast<std::size_t>(r) * width, lens[static_cast<std::size_t>(r)]),
        comm_.mesh->who(r)));
  return lists;
}

// Ready: pending on every rank that has not joined. Order: rank 0's submissions, then
// rank 1's others, ... (the same on all ranks; rank 0's order when nobody joined). A name
// the ranks that hold it disagree on fails here, with the same error on each of them.
std::vector<std::pair<std::string, FusionEngine::Entry>> FusionEngine::take_ready(
    const std::vector<RankList>& lists, const std::vector<bool>& joined, bool any_joined, std::set<std::string>& everywhere,
    std::deque<std::vector<char>>& stand_ins) {
  const int n = static_cast<int>(lists.size());
  std::vector<std::pair<std::string, Entry>> ready;
  // Without a joined rank only rank 0's names can be ready, so only its list is read.
  std::vector<std::pair<std::string, Spec>> candidates;
  std::set<std::string> seen;
  for (const auto& list : lists) {
    for (const auto& item : list.items)
      if (seen.insert(item.first).second) candidates.push_back(item);
    if (!any_joined) break;
  }
  for (const auto& [name, spec] : candidates) {
    bool in_all = true;
    std::vector<std::pair<int, Spec>> holders;
    for (int r = 0; r < n && in_all; ++r) {
      auto it = lists[static_cast<std::size_t>(r)].by_name.find(name);
      const bool has = it != lists[static_cast<std::size_t>(r)].by_name.end();
      in_all = has || joined[static_cast<std::size_t>(r)];
      if (has) holders.emplace_back(r, it->second);
    }
    if (!in_all) continue;
    // The same verdict on every rank: all read the same lists.
    const bool same = std::all_of(holders.begin(), holders.end(), [&](const auto& h) { return h.second == spec; });
    everywhere.insert(name);
    std::lock_guard lock(mu_);
    if (!pending_.count(name)) {  // joined here: stand in with the op's identity
      if (!same) continue;  // the ranks that hold it fail it
      auto& buf = stand_ins.emplace_back(spec.count * size_of(static_cast<DataType>(spec.type)));
      Entry e{buf.data(), spec.count, static_cast<DataType>(spec.type), static_cast<ReduceOp>(spec.op), nullptr, spec.shape};
      reduce::fill_identity(e.data, e.count, e.type, e.op);
      ready.emplace_back(name, e);
      continue;
    }
    Entry e = pending_.at(name);
    pending_.erase(name);
    std::erase(order_, name);
    partial_since_.erase(name);
    warned_.erase(name);
    if (!same) {
      e.state->finish(std::make_exception_ptr(Error(fusion_wire::mismatch(name, holders))));
      continue;
    }
    ready.emplace_back(name, e);
  }
  return ready;
}

// Names some ranks submitted and others did not: warned about after stall_warning, failed
// once any rank flags them past stall_abort. Returns whether there were any.
bool FusionEngine::report_stalls(const std::vector<RankList>& lists, const std::vector<bool>& joined,
                                 const std::set<std::string>& everywhere) {
  const int n = static_cast<int>(lists.size());
  std::map<std::string, std::vector<int>> holders;
  for (int r = 0; r < n; ++r)
    for (const auto& [name, spec] : lists[static_cast<std::size_t>(r)].items)
      if (!everywhere.count(name)) holders[name].push_back(r);
  auto now = std::chrono::steady_clock::now();
  for (const auto& [name, ranks] : holders) {
    auto since = partial_since_.try_emplace(name, now).first->second;
    auto waited = now - since;
    if (waited < comm_.options.stall_warning) continue;
    std::string have, missing;
    for (int r : ranks) have += (have.empty() ? "" : ", ") + std::to_string(r);
    for (int r = 0, k = 0; r < n; ++r) {
      if (k < static_cast<int>(ranks.size()) && ranks[static_cast<std::size_t>(k)] == r) { ++k; continue; }
      if (joined[static_cast<std::size_t>(r)]) continue;  // stands in; not what is missing
      missing += (missing.empty() ? "" : ", ") + comm_.mesh->who(r);
    }
    std::string report = "stall: tensor '" + name + "' was submitted by rank(s) " + have + " but " + missing +
                         " has not submitted it after " +
                         std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()) +
                         " ms; every rank must submit the same tensor names (look for code that skips a layer or "
                         "a parameter on some ranks)";
    if (!warned_[name]) {
      warned_[name] = true;
      comm_.counters->stall();
      if (comm_.where.rank == ranks.front()) log::warn("comm: " + report);
    }
    const bool flagged = std::any_of(lists.begin(), lists.end(), [&](const RankList& l) { return l.expired.count(name) > 0; });
    if (flagged) {
      std::lock_guard lock(mu_);
      if (auto it = pending_.find(name); it != pending_.end()) {
        it->second.state->finish(std::make_exception_ptr(Error("saker: " + report)));
        pending_.erase(it);
        std::erase(order_, name);
      }
    }
  }
  std::erase_if(partial_since_, [&](const auto& kv) { return !holders.count(kv.first); });
  return !holders.empty();
}

}  // namespace saker::comm
