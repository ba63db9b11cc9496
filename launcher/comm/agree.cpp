#include "launcher/comm/agree.hpp"

#include <algorithm>
#include <cstring>

#include "launcher/comm/ring.hpp"
#include "saker/error.hpp"

namespace saker::comm::agree {

namespace {

// Wire layout, in 64-bit words: magic, kind, type, param, problem, n, a[n], b[n].
constexpr std::uint64_t kMagic = 0x5341'4b45'5241'4731ull;  // "SAKERAG1"
constexpr std::size_t kHead = 6;

std::vector<std::uint64_t> encode(const Declared& d, int n) {
  std::vector<std::uint64_t> w(kHead + 2 * static_cast<std::size_t>(n), 0);
  w[0] = kMagic;
  w[1] = static_cast<std::uint64_t>(d.kind);
  w[2] = static_cast<std::uint64_t>(d.type);
  w[3] = d.param;
  w[4] = d.problem;
  w[5] = static_cast<std::uint64_t>(n);
  std::copy(d.a.begin(), d.a.end(), w.begin() + kHead);
  std::copy(d.b.begin(), d.b.end(), w.begin() + kHead + static_cast<std::ptrdiff_t>(n));
  return w;
}

// A word that is not what this build writes means the peer runs other code (or a
// different collective of some other library version): refuse rather than guess.
Declared decode(const std::uint64_t* w, int n, bool* foreign) {
  Declared d;
  *foreign = w[0] != kMagic || w[5] != static_cast<std::uint64_t>(n) || w[2] > static_cast<std::uint64_t>(DataType::i64) ||
             (w[1] != static_cast<std::uint64_t>(Kind::alltoall) && w[1] != static_cast<std::uint64_t>(Kind::reduce_scatter)) ||
             (w[1] == static_cast<std::uint64_t>(Kind::reduce_scatter) && w[3] > static_cast<std::uint64_t>(ReduceOp::prod));
  if (*foreign) return d;
  d.kind = static_cast<Kind>(w[1]);
  d.type = static_cast<DataType>(w[2]);
  d.param = w[3];
  d.problem = w[4];
  d.a.assign(w + kHead, w + kHead + n);
  d.b.assign(w + kHead + n, w + kHead + 2 * n);
  return d;
}

const char* kind_name(Kind k) { return k == Kind::alltoall ? "alltoall" : "reduce_scatter"; }

// "rank 0 f32, rank 1 i32" for a field that differs; "" when it does not.
template <class F>
std::string differs(const std::vector<Declared>& all, const char* field, F value) {
  std::string first = value(all[0]);
  bool same = std::all_of(all.begin(), all.end(), [&](const Declared& d) { return value(d) == first; });
  if (same) return "";
  std::string s = std::string(field) + " differs:";
  for (std::size_t r = 0; r < all.size(); ++r) s += (r ? ", rank " : " rank ") + std::to_string(r) + " " + value(all[r]);
  return s;
}

std::string list(const std::vector<std::uint64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size() && i < 8; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() > 8) s += ", ... (" + std::to_string(v.size()) + " counts)";
  return s + "]";
}

// Problems and kinds first: without them the rest of a row means nothing.
std::string common_verdict(const std::vector<Declared>& all) {
  for (std::size_t r = 0; r < all.size(); ++r) {
    const Declared& d = all[r];
    std::uint64_t code = d.problem & 0xff, len = d.problem >> 8;
    std::string who = "rank " + std::to_string(r);
    if (code == kCountsLength)
      return who + " gave " + std::to_string(len) + " counts for " + std::to_string(all.size()) + " ranks";
    if (code == kRecvLength)
      return who + " gave " + std::to_string(len) + " receive counts for " + std::to_string(all.size()) + " ranks";
    if (code == kCountTooLarge) return who + " gave a count of 2^48 or more";
  }
  std::string kinds = differs(all, "the collective", [](const Declared& d) { return std::string(kind_name(d.kind)); });
  if (!kinds.empty()) return kinds;
  return differs(all, "the type", [](const Declared& d) { return std::string(name_of(d.type)); });
}

}  // namespace

Declared declare(Kind kind, DataType type, std::uint64_t param, const std::vector<std::size_t>& a,
                 const std::vector<std::size_t>* b, int n) {
  Declared d;
  d.kind = kind;
  d.type = type;
  d.param = param;
  const std::size_t want = static_cast<std::size_t>(n);
  d.a.assign(want, 0);
  d.b.assign(want, kUnknown);
  if (a.size() != want) d.problem = kCountsLength | static_cast<std::uint64_t>(a.size()) << 8;
  else if (b && b->size() != want) d.problem = kRecvLength | static_cast<std::uint64_t>(b->size()) << 8;
  if (d.problem != kNone) return d;
  for (std::size_t i = 0; i < want; ++i) {
    if (a[i] >= kMaxCount || (b && (*b)[i] >= kMaxCount)) d.problem = kCountTooLarge;
    d.a[i] = a[i];
    if (b) d.b[i] = (*b)[i];
  }
  if (param >= kMaxCount) d.problem = kCountTooLarge;
  return d;
}

std::vector<Declared> gather(Ring& ring, const Declared& mine) {
  return gather(ring.size(), [&ring](const void* s, void* r, std::size_t b) { ring.allgather(s, r, b); }, mine);
}

std::vector<Declared> gather(int n, const Allgather& allgather, const Declared& mine) {
  std::vector<std::uint64_t> row = encode(mine, n);
  std::vector<std::uint64_t> table(row.size() * static_cast<std::size_t>(n));
  allgather(row.data(), table.data(), row.size() * sizeof(std::uint64_t));
  std::vector<Declared> all;
  for (int r = 0; r < n; ++r) {
    bool foreign = false;
    all.push_back(decode(table.data() + static_cast<std::size_t>(r) * row.size(), n, &foreign));
    if (foreign)
      throw Error(explain("rank " + std::to_string(r) + " sent a declaration this rank cannot read before a " +
                              kind_name(mine.kind),
                          "it runs another build of libsaker_comm, or called a different collective here",
                          "run the same saker build on every rank and issue the same collectives in the same order"));
  }
  return all;
}

// Whether nothing but the counts can differ: then no text need be built (the common case,
// which an alltoall of a few KiB inside a node would otherwise spend a good part of its time on).
static bool heads_agree(const std::vector<Declared>& all) {
  return std::all_of(all.begin(), all.end(), [&](const Declared& d) {
    return d.problem == kNone && d.kind == all[0].kind && d.type == all[0].type && d.param == all[0].param;
  });
}

std::string alltoall_verdict(const std::vector<Declared>& all) {
  if (!heads_agree(all)) {
    std::string why = common_verdict(all);
    if (why.empty())
      why = differs(all, "the row size (elements past dimension 0)", [](const Declared& d) { return std::to_string(d.param); });
    if (!why.empty()) return why;
  }
  for (std::size_t j = 0; j < all.size(); ++j)
    for (std::size_t i = 0; i < all.size(); ++i) {
      std::uint64_t expected = all[j].b[i], sent = all[i].a[j];
      if (expected != kUnknown && expected != sent)
        return "rank " + std::to_string(j) + " expects " + std::to_string(expected) + " rows from rank " + std::to_string(i) +
               ", which sends it " + std::to_string(sent);
    }
  return "";
}

std::string reduce_scatter_verdict(const std::vector<Declared>& all) {
  std::string why = common_verdict(all);
  if (why.empty())
    why = differs(all, "the op", [](const Declared& d) { return std::string(name_of(static_cast<ReduceOp>(d.param))); });
  if (why.empty()) why = differs(all, "the counts", [](const Declared& d) { return list(d.a); });
  return why;
}

void refuse(const char* collective, const std::string& name, const std::string& why) {
  std::string what = std::string(collective) + (name.empty() ? "" : " of '" + name + "'") + " refused on every rank";
  throw Mismatch(explain(what, "the ranks disagree: " + why,
                         "every rank must call the same collective with the same type, row size or op and "
                         "matching counts; nothing was sent and the communicator stays usable"));
}

}  // namespace saker::comm::agree
