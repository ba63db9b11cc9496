#include "launcher/comm/agree.hpp"

#include <algorithm>
#include <cstring>

#include "launcher/comm/ring.hpp"
#include "saker/error.hpp"

namespace saker::comm::agree {

namespace {

constexpr std::uint64_t kMagic = 0x5341'4b45'5241'4731ull;  // "SAKERAG1"
constexpr std::size_t kHead = Table::kHead;

// The declarations decoded, for the text of a refusal (the slow path).
struct Declared {
  Kind kind = Kind::alltoall;
  DataType type = DataType::f32;
  std::uint64_t param = 0;
  std::uint64_t problem = kNone;
  std::vector<std::uint64_t> a, b;
};

// A word that is not what this build writes means the peer runs other code (or a
// different collective of some other library version): refuse rather than guess.
bool foreign(const std::uint64_t* w, int n) {
  return w[0] != kMagic || w[5] != static_cast<std::uint64_t>(n) || w[2] > static_cast<std::uint64_t>(DataType::i64) ||
         (w[1] != static_cast<std::uint64_t>(Kind::alltoall) && w[1] != static_cast<std::uint64_t>(Kind::reduce_scatter)) ||
         (w[1] == static_cast<std::uint64_t>(Kind::reduce_scatter) && w[3] > static_cast<std::uint64_t>(ReduceOp::prod));
}

Declared decode(const std::uint64_t* w, int n) {
  Declared d;
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

// The texts, from the decoded declarations (common_verdict first in both).
std::string alltoall_text(const std::vector<Declared>& all) {
  std::string why = common_verdict(all);
  if (why.empty())
    why = differs(all, "the row size (elements past dimension 0)", [](const Declared& d) { return std::to_string(d.param); });
  if (!why.empty()) return why;
  for (std::size_t j = 0; j < all.size(); ++j)
    for (std::size_t i = 0; i < all.size(); ++i) {
      std::uint64_t expected = all[j].b[i], sent = all[i].a[j];
      if (expected != kUnknown && expected != sent)
        return "rank " + std::to_string(j) + " expects " + std::to_string(expected) + " rows from rank " + std::to_string(i) +
               ", which sends it " + std::to_string(sent);
    }
  return "";
}

std::string reduce_scatter_text(const std::vector<Declared>& all) {
  std::string why = common_verdict(all);
  if (why.empty())
    why = differs(all, "the op", [](const Declared& d) { return std::string(name_of(static_cast<ReduceOp>(d.param))); });
  if (why.empty()) why = differs(all, "the counts", [](const Declared& d) { return list(d.a); });
  return why;
}

// Every row decoded, in rank order; a row this build cannot read throws (naming its rank).
std::vector<Declared> decoded(const std::uint64_t* table, int n, std::size_t words, Kind mine) {
  std::vector<Declared> all;
  for (int r = 0; r < n; ++r) {
    const std::uint64_t* w = table + static_cast<std::size_t>(r) * words;
    if (foreign(w, n))
      throw Error(explain("rank " + std::to_string(r) + " sent a declaration this rank cannot read before a " +
                              kind_name(mine),
                          "it runs another build of libsaker_comm, or called a different collective here",
                          "run the same saker build on every rank and issue the same collectives in the same order"));
    all.push_back(decode(w, n));
  }
  return all;
}

}  // namespace

void Table::declare(Kind kind, DataType type, std::uint64_t param, const std::vector<std::size_t>& a,
                    const std::vector<std::size_t>* b, int n) {
  const std::size_t want = static_cast<std::size_t>(n);
  n_ = n;
  row_.assign(kHead + 2 * want, 0);  // the same size call after call: no allocation once warm
  all_.resize(row_.size() * want);
  std::uint64_t problem = kNone;
  if (a.size() != want) problem = kCountsLength | static_cast<std::uint64_t>(a.size()) << 8;
  else if (b && b->size() != want) problem = kRecvLength | static_cast<std::uint64_t>(b->size()) << 8;
  std::fill(row_.begin() + static_cast<std::ptrdiff_t>(kHead + want), row_.end(), kUnknown);
  if (problem == kNone) {
    for (std::size_t i = 0; i < want; ++i) {
      if (a[i] >= kMaxCount || (b && (*b)[i] >= kMaxCount)) problem = kCountTooLarge;
      row_[kHead + i] = a[i];
      if (b) row_[kHead + want + i] = (*b)[i];
    }
    if (param >= kMaxCount) problem = kCountTooLarge;
  }
  row_[0] = kMagic;
  row_[1] = static_cast<std::uint64_t>(kind);
  row_[2] = static_cast<std::uint64_t>(type);
  row_[3] = param;
  row_[4] = problem;
  row_[5] = static_cast<std::uint64_t>(n);
}

bool Table::heads_agree() const {
  for (int r = 0; r < n_; ++r) {
    const std::uint64_t* w = all_.data() + static_cast<std::size_t>(r) * row_.size();
    if (foreign(w, n_) || w[4] != kNone || w[1] != all_[1] || w[2] != all_[2] || w[3] != all_[3]) return false;
  }
  return true;
}

// The words alone decide agreement; the text is built (from decoded rows) only to refuse.
std::string Table::alltoall_verdict() const {
  bool agree = heads_agree();
  const std::size_t n = static_cast<std::size_t>(n_);
  for (int j = 0; agree && j < n_; ++j)
    for (int i = 0; i < n_; ++i) {
      const std::uint64_t expected = cell(j, kHead + n + static_cast<std::size_t>(i));
      if (expected != kUnknown && expected != rows(i, j)) agree = false;
    }
  return agree ? std::string() : alltoall_text(decoded(all_.data(), n_, row_.size(), static_cast<Kind>(row_[1])));
}

std::string Table::reduce_scatter_verdict() const {
  bool agree = heads_agree();
  for (int r = 1; agree && r < n_; ++r)
    agree = std::equal(all_.begin() + kHead, all_.begin() + static_cast<std::ptrdiff_t>(kHead) + n_,
                       all_.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r) * row_.size() + kHead));
  return agree ? std::string() : reduce_scatter_text(decoded(all_.data(), n_, row_.size(), static_cast<Kind>(row_[1])));
}

std::uint64_t Table::max_pair_rows() const {
  std::uint64_t most = 0;
  for (int i = 0; i < n_; ++i)
    for (int j = 0; j < n_; ++j)
      if (i != j) most = std::max(most, rows(i, j));
  return most;
}

void gather(Ring& ring, Table& t) { ring.allgather(t.row(), t.all(), t.row_bytes()); }

void refuse(const char* collective, const std::string& name, const std::string& why) {
  std::string what = std::string(collective) + (name.empty() ? "" : " of '" + name + "'") + " refused on every rank";
  throw Mismatch(explain(what, "the ranks disagree: " + why,
                         "every rank must call the same collective with the same type, row size or op and "
                         "matching counts; nothing was sent and the communicator stays usable"));
}

}  // namespace saker::comm::agree
