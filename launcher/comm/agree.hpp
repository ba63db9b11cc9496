// What each rank declares before an alltoall or a reduce-scatter moves any data, and the
// verdict every rank draws from all of them.
//
// Ring allgathers of raw bytes trust that every rank passes the same sizes; alltoall and
// reduce-scatter take per-rank counts, so a rank that disagrees (another type, another
// row size, counts that do not add up) would have its bytes read as something else, or
// leave a peer waiting for bytes that never come. So each rank first allgathers a small
// fixed-size declaration (the same size for both collectives, so that even a rank that
// called the other one is seen, by its kind, rather than desynchronising the links).
// Every rank holds the same table and draws the same verdict: either all go on, or all
// throw the same saker::Error naming the ranks and their values, with the links intact.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "saker/comm.hpp"
#include "saker/error.hpp"

namespace saker::comm {

class Ring;

namespace agree {

enum class Kind : std::uint64_t { alltoall = 1, reduce_scatter = 2 };

// What the declaration could not say: the caller's arguments were unusable here. Every
// rank then refuses alike, naming the rank at fault.
enum Problem : std::uint64_t { kNone = 0, kCountsLength = 1, kCountTooLarge = 2, kRecvLength = 3 };

// A count this large (2^48 rows or elements) is refused before any size is computed.
constexpr std::uint64_t kMaxCount = std::uint64_t{1} << 48;
constexpr std::uint64_t kUnknown = ~std::uint64_t{0};

struct Declared {
  Kind kind = Kind::alltoall;
  DataType type = DataType::f32;
  std::uint64_t param = 0;        // alltoall: elements per row; reduce-scatter: the op
  std::uint64_t problem = kNone;  // Problem, with the offending length << 8
  std::vector<std::uint64_t> a;   // alltoall: rows sent to each rank; reduce-scatter: counts
  std::vector<std::uint64_t> b;   // alltoall: rows expected from each rank (kUnknown: learn them)
};

// A declaration for n ranks from the caller's arguments (never throws on bad ones: it
// records the problem so that every rank can refuse together).
Declared declare(Kind kind, DataType type, std::uint64_t param, const std::vector<std::size_t>& a,
                 const std::vector<std::size_t>* b, int n);

// Collective over ring (every member, in ring order = rank order): every rank's declaration.
std::vector<Declared> gather(Ring& ring, const Declared& mine);
// The same over any allgather of equal-sized byte rows among n ranks in rank order (the
// node's shared memory, when the data goes that way too).
using Allgather = std::function<void(const void* send, void* recv, std::size_t bytes)>;
std::vector<Declared> gather(int n, const Allgather& allgather, const Declared& mine);
// On the communicator's user channel, the way its alltoall's data goes (alltoall.cpp): the
// node's shared memory when every rank is on it, else the ring. Every collective that
// declares must gather the same way, or a rank in one would wait for a rank in the other.
std::vector<Declared> gather(Communicator::Impl& impl, const Declared& mine);

// "" when the ranks agree, else why not (the same text on every rank).
std::string alltoall_verdict(const std::vector<Declared>& all);
std::string reduce_scatter_verdict(const std::vector<Declared>& all);

// The exception a verdict becomes: a saker::Error that leaves the communicator usable.
class Mismatch : public Error {
 public:
  using Error::Error;
};
[[noreturn]] void refuse(const char* collective, const std::string& name, const std::string& why);

}  // namespace agree

// Queues op on the communicator's worker (alltoall.cpp). An agree::Mismatch fails only
// the returned handle; any other failure also breaks the communicator, as every
// collective's does (the links are in an unknown state then).
Handle submit_refusable(Communicator::Impl& impl, std::function<void()> op, const std::string& what);
}  // namespace saker::comm
