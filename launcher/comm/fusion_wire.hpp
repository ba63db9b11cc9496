// Tensor fusion's negotiation wire format: each rank's pending list as text, decoded and
// checked before anything it says sizes an allocation, and the cross-rank check that
// refuses a name the ranks disagree on (type, op, element count, shape).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace saker::comm {

// The negotiation's wire format, checked before anything it says sizes an allocation
// (issue 28: a length off the wire made the fusion thread die of std::bad_alloc).
namespace fusion_wire {

// A rank's pending list: a line per tensor, ~100 bytes. 64 MiB is over half a million
// tensors, beyond any model, yet far below what would exhaust a node's memory.
constexpr std::uint64_t kMaxListBytes = 64u << 20;
// A tensor a joined rank stands in for (it allocates that much): 1 TiB keeps the
// product of count and element size far from overflow.
constexpr std::uint64_t kMaxTensorBytes = 1ull << 40;

// A shape travels as its dimensions joined by commas ("3,4"); "" where the caller gave none.
constexpr std::size_t kMaxShapeText = 256;

struct Spec {
  std::size_t count;
  int type, op;
  std::string shape;
  bool operator==(const Spec&) const = default;
};

struct RankList {
  bool stop = false;
  bool joined = false;
  std::vector<std::pair<std::string, Spec>> items;  // submission order
  std::map<std::string, Spec> by_name;
  std::set<std::string> expired;  // stalled past stall_abort on this rank
};

std::string encode(bool stop, bool joined, const std::vector<std::pair<std::string, Spec>>& items,
                   const std::set<std::string>& expired);
// from names the sender in errors ("rank 3 (host node7)"). Throws saker::Error on a
// malformed line, an unknown type or op, or a tensor over kMaxTensorBytes.
RankList decode(std::string_view text, const std::string& from);
// "" when every rank in `holders` (rank, its spec) submitted the same spec under `name`,
// else the text every rank refuses it with: each differing field (type, op, element count,
// shape) with each value and the ranks that gave it.
std::string mismatch(const std::string& name, const std::vector<std::pair<int, Spec>>& holders);
// The widest of the ranks' list lengths; throws, naming who(r), for one over kMaxListBytes.
std::size_t checked_width(const std::vector<std::uint64_t>& lens, const std::function<std::string(int)>& who);

}  // namespace fusion_wire

}  // namespace saker::comm
