#include "launcher/comm/fusion.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <deque>
#include <set>
#include <sstream>

#include "common/error.hpp"
#include "common/json.hpp"
#include "common/log.hpp"
#include "launcher/comm/reduce.hpp"

namespace saker::comm {
namespace fusion_wire {

// One line per pending tensor: name \x1f count \x1f type \x1f op \x1f expired \x1f shape. The first
// line holds the stop flag, then J when the rank has joined. Names may hold anything but
// newlines and \x1f (checked at enqueue).
std::string encode(bool stop, bool joined, const std::vector<std::pair<std::string, Spec>>& items,
                   const std::set<std::string>& expired) {
  std::string s = stop ? "S1" : "S0";
  s += joined ? "J\n" : "\n";
  for (const auto& [name, spec] : items)
    s += name + '\x1f' + std::to_string(spec.count) + '\x1f' + std::to_string(spec.type) + '\x1f' +
         std::to_string(spec.op) + '\x1f' + (expired.count(name) ? '1' : '0') + '\x1f' + spec.shape + '\n';
  return s;
}

namespace {

template <class T>
T field(std::string_view line, std::size_t from, std::size_t to, const std::string& who) {
  T v{};
  auto [end, ec] = std::from_chars(line.data() + from, line.data() + to, v);
  if (ec != std::errc() || end != line.data() + to)
    throw Error(explain("the fusion negotiation from " + who + " is malformed",
                        "a count, type or op is not a number in range",
                        "every rank must run the same Saker version; a rank that sends this is broken or not ours"));
  return v;
}

}  // namespace

RankList decode(std::string_view text, const std::string& from) {
  RankList out;
  auto nl = text.find('\n');
  std::string_view head = text.substr(0, nl);
  out.stop = head.starts_with("S1");
  out.joined = head.size() > 2 && head[2] == 'J';
  while (nl != std::string_view::npos && nl + 1 < text.size()) {
    std::size_t start = nl + 1;
    nl = text.find('\n', start);
    std::string_view line = text.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    auto a = line.find('\x1f'), b = line.find('\x1f', a + 1), c = line.find('\x1f', b + 1);
    auto e = c == std::string_view::npos ? c : line.find('\x1f', c + 1);
    if (e == std::string_view::npos) continue;
    Spec s{field<std::size_t>(line, a + 1, b, from), field<int>(line, b + 1, c, from), field<int>(line, c + 1, e, from), ""};
    if (s.type < 0 || s.type > static_cast<int>(DataType::i64) || s.op < 0 || s.op > static_cast<int>(ReduceOp::avg) ||
        s.count > kMaxTensorBytes / size_of(static_cast<DataType>(s.type)))
      throw Error(explain("the fusion negotiation from " + from + " names a tensor of type " + std::to_string(s.type) +
                              ", op " + std::to_string(s.op) + " and " + std::to_string(s.count) + " elements",
                          "types are 0-5, ops 0-3, and a tensor holds at most 1 TiB",
                          "every rank must run the same Saker version; a rank that sends this is broken or not ours"));
    const auto g = line.find('\x1f', e + 1);  // before the shape (absent from older lines)
    if (g != std::string_view::npos) {
      s.shape = std::string(line.substr(g + 1));
      if (s.shape.size() > kMaxShapeText || s.shape.find_first_not_of("0123456789,") != std::string::npos)
        throw Error(explain("the fusion negotiation from " + from + " gives a shape that is not dimensions",
                            "a shape is at most 256 digits and commas",
                            "every rank must run the same Saker version; a rank that sends this is broken or not ours"));
    }
    const std::string name(line.substr(0, a));
    out.items.emplace_back(name, s);
    out.by_name[name] = s;
    if (line.substr(e + 1, g == std::string_view::npos ? g : g - e - 1) == "1") out.expired.insert(name);
  }
  return out;
}

namespace {

// "fp32 on rank 0, int32 on ranks 1, 2" when the holders' values of a field differ, else "".
template <class F>
std::string differs(const char* field, const std::vector<std::pair<int, Spec>>& holders, F value) {
  std::vector<std::pair<std::string, std::vector<int>>> by_value;  // in order of first appearance
  for (const auto& [rank, spec] : holders) {
    std::string v = value(spec);
    auto it = std::find_if(by_value.begin(), by_value.end(), [&](const auto& p) { return p.first == v; });
    if (it == by_value.end()) it = by_value.insert(by_value.end(), {v, {}});
    it->second.push_back(rank);
  }
  if (by_value.size() < 2) return "";
  std::string s = std::string(field) + " differs:";
  for (std::size_t i = 0; i < by_value.size(); ++i) {
    const auto& ranks = by_value[i].second;
    s += (i ? ", " : " ") + by_value[i].first + (ranks.size() == 1 ? " on rank " : " on ranks ");
    for (std::size_t k = 0; k < ranks.size() && k < 8; ++k) s += (k ? ", " : "") + std::to_string(ranks[k]);
    if (ranks.size() > 8) s += ", ... (" + std::to_string(ranks.size()) + " ranks)";
  }
  return s;
}

std::string shape_text(const std::string& shape) {
  if (shape.empty()) return "(no shape given)";
  std::string s = "[";
  for (char ch : shape) s += ch == ',' ? std::string(", ") : std::string(1, ch);
  return s + "]";
}

}  // namespace

std::string mismatch(const std::string& name, const std::vector<std::pair<int, Spec>>& holders) {
  std::string fields;
  auto add = [&](std::string d) {
    if (!d.empty()) fields += (fields.empty() ? "" : "; ") + d;
  };
  add(differs("type", holders, [](const Spec& s) { return std::string(name_of(static_cast<DataType>(s.type))); }));
  add(differs("op", holders, [](const Spec& s) { return std::string(name_of(static_cast<ReduceOp>(s.op))); }));
  add(differs("element count", holders, [](const Spec& s) { return std::to_string(s.count); }));
  add(differs("shape", holders, [](const Spec& s) { return shape_text(s.shape); }));
  if (fields.empty()) return "";
  return explain("tensor '" + name + "' differs between ranks: " + fields,
                 "one name must carry the same type, op, element count and shape on every rank; the tensor was "
                 "refused before any byte of it moved, rather than one rank's bytes read as another's",
                 "check that the model, its dtype casts and the names given to the collectives are the same on every rank");
}

std::size_t checked_width(const std::vector<std::uint64_t>& lens, const std::function<std::string(int)>& who) {
  std::size_t width = 0;
  for (std::size_t r = 0; r < lens.size(); ++r) {
    if (lens[r] > kMaxListBytes)
      throw Error(explain(who(static_cast<int>(r)) + " announced a fusion negotiation of " + std::to_string(lens[r]) +
                              " bytes",
                          "a pending list holds at most 64 MiB (over half a million tensors)",
                          "every rank must run the same Saker version; a rank that sends this is broken or not ours"));
    width = std::max<std::size_t>(width, lens[r]);
  }
  return width;
}

}  // namespace fusion_wire

namespace {
using fusion_wire::RankList;
using fusion_wire::Spec;
}  // namespace

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

// Consecutive tensors of one type and op fused up to the fusion buffer's size.
void FusionEngine::reduce_ready(const std::vector<std::pair<std::string, Entry>>& ready) {
  Transport t = comm_.transport;
  std::vector<std::pair<std::string, Entry>> group;
  std::size_t group_bytes = 0;
  for (const auto& item : ready) {
    std::size_t bytes = item.second.count * size_of(item.second.type);
    if (!group.empty() && (group_bytes + bytes > comm_.options.fusion_bytes || item.second.type != group[0].second.type ||
                           item.second.op != group[0].second.op)) {
      reduce_group(group, t);
      group.clear();
      group_bytes = 0;
    }
    group.push_back(item);
    group_bytes += bytes;
  }
  if (!group.empty()) reduce_group(group, t);
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

void FusionEngine::reduce_group(const std::vector<std::pair<std::string, Entry>>& group, Transport t) {
  Core& core = *comm_.fusion;
  const Entry& first = group.front().second;
  std::size_t es = size_of(first.type);
  std::string names;
  for (const auto& g : group) names += (names.empty() ? "" : ",") + g.first;
  std::string args = "{\"tensors\":" + json::quote(names) + "}";
  try {
    if (group.size() == 1) {
      Timeline::Scope s(comm_.timeline.get(), "allreduce " + group[0].first, "op", kTidFusion, args);
      core.allreduce(first.data, first.count, first.type, first.op, t);
    } else {
      // Segment-major layout: segment j of the fused buffer holds segment j of every
      // tensor, so each element is reduced in the same order as an unfused call, and
      // results do not depend on which tensors happened to be fused together.
      int parts = core.ring_size(t);
      std::vector<std::vector<std::size_t>> splits;
      std::size_t total = 0;
      for (const auto& g : group) {
        splits.push_back(Ring::even_split(g.second.count, parts));
        total += g.second.count;
      }
      if (buffer_.size() < total * es) buffer_.resize(total * es);
      std::vector<std::size_t> segs{0};
      auto walk = [&](bool pack) {
        std::size_t off = 0;
        for (int j = 0; j < parts; ++j) {
          for (std::size_t k = 0; k < group.size(); ++k) {
            std::size_t b = splits[k][static_cast<std::size_t>(j)], e = splits[k][static_cast<std::size_t>(j) + 1];
            char* user = static_cast<char*>(group[k].second.data) + b * es;
            if (pack) std::memcpy(buffer_.data() + off * es, user, (e - b) * es);
            else std::memcpy(user, buffer_.data() + off * es, (e - b) * es);
            off += e - b;
          }
          if (pack) segs.push_back(off);
        }
      };
      {
        Timeline::Scope s(comm_.timeline.get(), "fuse", "fuse", kTidFusion, args);
        walk(true);
      }
      {
        Timeline::Scope s(comm_.timeline.get(), "allreduce fused", "op", kTidFusion, args);
        core.allreduce(buffer_.data(), total, first.type, first.op, t, parts > 1 ? segs : std::vector<std::size_t>{});
      }
      Timeline::Scope s(comm_.timeline.get(), "unfuse", "fuse", kTidFusion, args);
      walk(false);
    }
  } catch (...) {
    for (const auto& g : group)
      if (g.second.state) g.second.state->finish(std::current_exception());
    throw;  // the links are broken: stop the fusion thread
  }
  for (const auto& g : group)
    if (g.second.state) g.second.state->finish();  // a joined rank's stand-ins have none
}

}  // namespace saker::comm
