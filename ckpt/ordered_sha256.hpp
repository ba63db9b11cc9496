// The SHA-256 of a whole file, taken from the pieces a load reads anyway (issue 30).
//
// Why: provenance names a loaded checkpoint by the SHA-256 of its main file. Reading the
// file a second time for it (at load or at the next save) doubled the I/O of a resume.
// The load reads the tensors in file order through one descriptor; this hashes each piece
// as it passes, reads only what lies between pieces (HDF5 metadata, the user block: small)
// and the tail, all through that same descriptor, so the digest is of the very file whose
// bytes were loaded, not of whatever the path names later.
//
// Pieces come one caller at a time (the reader thread or the hash helper, never both at
// once). A piece behind the hashed prefix's end (the small RNG and cursor blobs lie before
// the tensors but are read after them) was hashed already, as part of what lay between
// earlier pieces, read through the same descriptor; so the digest is always the whole
// file's, and in the loader's order the file is read once plus its metadata.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

struct evp_md_ctx_st;

namespace saker::ckpt {

class OrderedSha256 {
 public:
  // Does not own fd. drop_behind: the pages it reads itself leave the page cache, as the load's do.
  OrderedSha256(int fd, bool drop_behind);
  ~OrderedSha256();
  OrderedSha256(const OrderedSha256&) = delete;
  OrderedSha256& operator=(const OrderedSha256&) = delete;

  // The file's bytes [at, at + n) are `p`: hashes what lies between the last piece and
  // `at` (read through fd), then `p`. Never throws (a read error makes the digest unavailable).
  void piece(std::uint64_t at, const std::byte* p, std::size_t n);
  // Hashes the rest of the file up to its end and returns the 64 hex digits, or nullopt
  // when a read failed. Call once, after the last piece.
  std::optional<std::string> finish();
  // Bytes read through fd beyond the pieces (gaps and tail), for tests and benchmarks.
  std::uint64_t extra_bytes() const { return extra_; }

 private:
  bool hash_range(std::uint64_t from, std::uint64_t to);  // through fd; to == UINT64_MAX: to EOF

  int fd_;
  evp_md_ctx_st* ctx_;
  std::uint64_t upto_ = 0;  // bytes [0, upto_) are hashed
  std::uint64_t extra_ = 0;
  bool drop_behind_;
  bool ok_;
};

}  // namespace saker::ckpt
