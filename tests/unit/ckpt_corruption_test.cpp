#include <catch2/catch.hpp>
#include <hdf5.h>

#include <fstream>
#include <random>

#include "ckpt_test_util.hpp"

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
