#include <catch2/catch.hpp>
#include <hdf5.h>

#include <fstream>
#include <random>

#include "ckpt_test_util.hpp"
#include "ckpt/crypto.hpp"
#include "common/hash.hpp"

using namespace saker::ckpt;
using namespace saker::ckpt::testing;
namespace fs = std::filesystem;

namespace {

// Byte ranges [offset, offset+size) of every dataset's data in a file, found with plain
// HDF5 so the test does not trust the code under test.
std::vector<std::pair<haddr_t, hsize_t>> data_ranges(const fs::path& file) {
  std::vector<std::pair<haddr_t, hsize_t>> out;
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(f >= 0);
  H5Ovisit2(
      f, H5_INDEX_NAME, H5_ITER_INC,
      [](hid_t obj, const char* name, const H5O_info_t* info, void* data) -> herr_t {
        if (info->type != H5O_TYPE_DATASET) return 0;
        hid_t d = H5Dopen2(obj, name, H5P_DEFAULT);
        const hsize_t size = H5Dget_storage_size(d);
        if (size > 0) static_cast<std::vector<std::pair<haddr_t, hsize_t>>*>(data)->emplace_back(H5Dget_offset(d), size);
        H5Dclose(d);
        return 0;
      },
      &out, H5O_INFO_BASIC);
  H5Fclose(f);
  return out;
}

void flip_bit(const fs::path& file, std::uint64_t byte, int bit) {
  std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(static_cast<std::streamoff>(byte));
  char c = 0;
  io.get(c);
  c = static_cast<char>(c ^ (1 << bit));
  io.seekp(static_cast<std::streamoff>(byte));
  io.put(c);
}

}  // namespace

TEST_CASE("a single-bit flip anywhere in tensor data is detected", "[ckpt][corruption]") {
  TempDir dir;
  {
    Checkpointer ck(dir.path());
    ck.save(make_state(1, 4096));
  }
  const fs::path file = dir / "ckpt-000000000001.h5";
  const fs::path pristine = dir / "pristine";
  fs::copy_file(file, pristine);
  const auto ranges = data_ranges(file);
  REQUIRE(ranges.size() == 5);  // three tensors, rng_state, data_cursor
  std::mt19937_64 rng(12345);
  int flips = 0;
  for (const auto& [offset, size] : ranges) {
    // The first and last byte of every dataset, and random bytes in between.
    std::vector<std::uint64_t> where{0, size - 1};
    for (int i = 0; i < 30; ++i) where.push_back(rng() % size);
    for (std::uint64_t at : where) {
      fs::copy_file(pristine, file, fs::copy_options::overwrite_existing);
      flip_bit(file, offset + at, static_cast<int>(rng() % 8));
      const Verdict v = verify(file);
      INFO("flip at byte " << offset + at);
      REQUIRE_FALSE(v.ok);
      CHECK_THAT(v.problem, Catch::Contains("checksum mismatch"));
      ++flips;
    }
  }
  CHECK(flips == 5 * 32);
  fs::copy_file(pristine, file, fs::copy_options::overwrite_existing);
  CHECK(verify(file).ok);
}

TEST_CASE("a damaged newest checkpoint is never loaded: fall back and say why", "[ckpt][corruption]") {
  TempDir dir;
  Checkpointer ck(dir.path());
  ck.save(make_state(1));
  ck.save(make_state(2));
  const fs::path newest = dir / "ckpt-000000000002.h5";
  SECTION("bit flip") {
    const auto ranges = data_ranges(newest);
    flip_bit(newest, ranges.front().first + 3, 2);
  }
  SECTION("truncated") { fs::resize_file(newest, fs::file_size(newest) - 100); }
  SECTION("truncated to half") { fs::resize_file(newest, fs::file_size(newest) / 2); }
  SECTION("emptied") { fs::resize_file(newest, 0); }
  auto got = ck.load_latest();
  REQUIRE(got);
  CHECK(got->state.step == 1);
  REQUIRE(got->rejected.size() == 1);
  CHECK_THAT(got->rejected[0], Catch::Contains("ckpt-000000000002.h5"));
  CHECK_FALSE(verify(newest).ok);
  CHECK(verify(dir / "ckpt-000000000001.h5").ok);
}

TEST_CASE("a missing shard file makes the checkpoint unusable", "[ckpt][corruption]") {
  TempDir dir;
  {
    Checkpointer ck(dir.path());
    ck.save(make_state(1));
  }
  // Hand-made 2-rank checkpoint at step 2 whose rank 1 shard is absent.
  {
    Checkpointer ck(dir.path());
    State st = make_state(2);
    st.rank = 1;
    st.world_size = 2;
    ck.save(st);  // rank 1 publishes its shard and returns (no barrier)
  }
  {
    Checkpointer ck(dir.path());
    State st = make_state(2);
    st.world_size = 2;
    ck.save(st);
  }
  fs::remove(dir / "ckpt-000000000002.shard-00001.h5");
  Checkpointer ck(dir.path());
  auto got = ck.load_latest();
  REQUIRE(got);
  CHECK(got->state.step == 1);
  CHECK_THAT(got->rejected.at(0), Catch::Contains("shard-00001"));
}

// Issue 30 §5: header bytes 48..79 (the manifest's GCM tag, its nonce, four unused bytes)
// were outside the keyless checksum, so verify, ls and prune accepted a flipped tag or
// nonce that every resume then rejected. Since format 3 the header checksum covers them,
// and they must be zero where unused (no tag in a plaintext file; bytes 76..79 always).
namespace {

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

fs::path write_key(const TempDir& dir) {
  auto bytes = random_bytes(32, 4242);
  write_file(dir / "key", std::string(reinterpret_cast<const char*>(bytes.data()), 32), 0600);
  return dir / "key";
}

// Turns a file this release wrote into the format-2 header every earlier release wrote:
// magic "v2", manifest line "saker-ckpt-manifest 2", and the checksum over the manifest
// alone (bytes 48..79 as they were: an encrypted file's manifest tag, re-made here because
// the manifest's first line changed, or zeros).
void to_format_2(const fs::path& file, const fs::path& key_file) {
  std::string b = read_all(file);
  std::uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<unsigned char>(b[24 + i]);
  b[12] = '2';
  const std::string first = "saker-ckpt-manifest 3\n", old_first = "saker-ckpt-manifest 2\n";
  if (b.compare(80, first.size(), first) == 0) b.replace(80, first.size(), old_first);
  const std::string text = b.substr(80, len);
  if (!key_file.empty()) {
    const crypto::Sealed mac = crypto::seal(crypto::load_key(key_file), {}, "saker-ckpt/2/manifest\n" + text);
    std::copy(mac.tag.begin(), mac.tag.end(), b.begin() + 48);
    std::copy(mac.nonce.begin(), mac.nonce.end(), b.begin() + 64);
  }
  const std::string d = saker::hash::xxh3_128(text.data(), text.size()).hex();
  for (int i = 0; i < 16; ++i) b[32 + i] = static_cast<char>(std::stoi(d.substr(2 * i, 2), nullptr, 16));
  std::ofstream(file, std::ios::binary | std::ios::trunc) << b;
}

}  // namespace

TEST_CASE("keyless verify rejects any change to header bytes 48..79 (tag, nonce, unused)", "[ckpt][corruption]") {
  const bool encrypted = GENERATE(false, true);
  INFO((encrypted ? "encrypted" : "plain"));
  TempDir dir;
  Options o;
  if (encrypted) o.key_file = write_key(dir);
  Checkpointer ck(dir / "c", o);
  ck.save(make_state(1, 64));
  const fs::path file = list_checkpoints(dir / "c").back();
  REQUIRE(verify(file).ok);
  int undetected = 0;
  for (std::uint64_t byte = 48; byte < 80; ++byte) {
    for (int bit : {0, 7}) {
      flip_bit(file, byte, bit);
      const Verdict v = verify(file);  // no key: what saker-ckpt verify, ls and prune judge
      if (v.ok) {
        ++undetected;
        UNSCOPED_INFO("byte " << byte << " bit " << bit << " undetected");
      } else {
        CHECK(v.problem.find("damaged") != std::string::npos);
      }
      flip_bit(file, byte, bit);
    }
  }
  CHECK(undetected == 0);
  CHECK(verify(file).ok);
}

TEST_CASE("format-2 checkpoints (header checksum over the manifest alone) still verify and load", "[ckpt][corruption]") {
  const bool encrypted = GENERATE(false, true);
  INFO((encrypted ? "encrypted" : "plain"));
  TempDir dir;
  Options o;
  if (encrypted) o.key_file = write_key(dir);
  {
    Checkpointer ck(dir / "c", o);
    ck.save(make_state(7, 64));
  }
  const fs::path file = list_checkpoints(dir / "c").back();
  to_format_2(file, o.key_file);
  REQUIRE(read_all(file).substr(0, 16) == std::string("saker-ckpt\0v2\0\0\0", 16));
  const Verdict v = verify(file, {}, o.key_file);
  INFO(v.problem);
  CHECK(v.ok);
  Checkpointer ck(dir / "c", o);
  auto got = ck.load_latest();
  REQUIRE(got);
  CHECK(got->state.step == 7);
  // Where earlier releases always wrote zeros, a format-2 file must hold zeros too.
  flip_bit(file, 77, 0);
  CHECK_FALSE(verify(file).ok);
  flip_bit(file, 77, 0);
  if (!encrypted) {
    flip_bit(file, 50, 3);  // a "tag" in a plaintext file
    CHECK_FALSE(verify(file).ok);
    flip_bit(file, 50, 3);
  }
  CHECK(verify(file).ok);
  // Saves from now on write format 3.
  ck.save(make_state(8, 64));
  CHECK(read_all(list_checkpoints(dir / "c").back()).substr(0, 16) == std::string("saker-ckpt\0v3\0\0\0", 16));
}
