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

// Every rank's declaration in its wire form, 64-bit words: magic, kind, type, param (alltoall:
// elements per row; reduce-scatter: the op), problem (Problem, with the offending length
// << 8), n, a[n] (alltoall: rows sent to each rank; reduce-scatter: counts), b[n] (alltoall:
// rows expected from each rank, kUnknown: learn them). A caller keeps its Table from call to
// call (the shared-memory path's lives in ShmGroup::reused()): declaring, gathering and
// judging then allocate nothing once warm, which a 1 KiB alltoall inside a node notices.
class Table {
 public:
  static constexpr std::size_t kHead = 6;  // words before a row's counts
  // Sizes the table for n ranks (allocates only when n grows) and writes this rank's row
  // from the caller's arguments. Never throws on bad arguments: it records the problem so
  // that every rank can refuse together.
  void declare(Kind kind, DataType type, std::uint64_t param, const std::vector<std::size_t>& a,
               const std::vector<std::size_t>* b, int n);
  const std::uint64_t* row() const { return row_.data(); }
  std::size_t row_bytes() const { return row_.size() * sizeof(std::uint64_t); }
  bool problem() const { return row_[4] != kNone; }
  // Where a gather puts every rank's row, in rank order (n * row_bytes()).
  std::uint64_t* all() { return all_.data(); }

  // After a gather: "" when the ranks agree, else why not (the same text on every rank).
  // Every rank agreeing is found on the words themselves, with no text built. Throws
  // saker::Error when a row is not this build's declaration (another build, or garbage).
  std::string alltoall_verdict() const;
  std::string reduce_scatter_verdict() const;
  // After an agreed alltoall: rows `from` sends `to`, and the most rows any rank sends
  // another (the shared-memory path's round count, the same on every rank).
  std::uint64_t rows(int from, int to) const { return cell(from, kHead + static_cast<std::size_t>(to)); }
  std::uint64_t max_pair_rows() const;

 private:
  std::uint64_t cell(int rank, std::size_t word) const { return all_[static_cast<std::size_t>(rank) * row_.size() + word]; }
  bool heads_agree() const;  // every row valid, without a problem, with row 0's kind, type and param
  int n_ = 0;
  std::vector<std::uint64_t> row_, all_;
};

// Collective over ring (every member, in ring order = rank order): every rank's row into
// t.all().
void gather(Ring& ring, Table& t);
// On the communicator's user channel, the way its alltoall's data goes (alltoall.cpp): the
// node's shared memory when every rank is on it, else the ring. Every collective that
// declares must gather the same way, or a rank in one would wait for a rank in the other.
void gather(Communicator::Impl& impl, Table& t);

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
