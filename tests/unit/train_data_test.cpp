#include <catch2/catch.hpp>

#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "common/error.hpp"
#include "launcher/train/dataset.hpp"
#include "launcher/train/loader.hpp"

using namespace saker::train;

TEST_CASE("synthetic data is deterministic and HDF5 round-trips it") {
  const SyntheticSpec spec{.rows = 300, .features = 5, .classes = 3, .spread = 1.0, .seed = 9};
  const Dataset a = make_synthetic(spec), b = make_synthetic(spec);
  CHECK(a.x == b.x);
  CHECK(a.y == b.y);
  CHECK(*std::max_element(a.y.begin(), a.y.end()) == 2);
  const std::string path = "/tmp/saker-train-test-" + std::to_string(::getpid()) + ".h5";
  write_dataset(a, path);
  const Dataset c = read_dataset(path);
  std::filesystem::remove(path);
  CHECK(c.rows == 300);
  CHECK(c.features == 5);
  CHECK(c.classes == 3);
  CHECK(c.x == a.x);
  CHECK(c.y == a.y);
  CHECK_THROWS_AS(read_dataset("/nonexistent/data.h5"), saker::Error);
  CHECK_THROWS_AS(make_synthetic(SyntheticSpec{.rows = 10, .features = 2, .classes = 1}), saker::Error);
}

TEST_CASE("the ranks of a global batch split it, and an epoch visits every row once") {
  const int rows = 100, batch = 20, world = 3;
  std::vector<Loader> loaders;
  for (int r = 0; r < world; ++r) loaders.emplace_back(rows, batch, r, world, 5);
  std::multiset<std::uint32_t> seen;
  for (int step = 0; step < rows / batch; ++step) {
    std::size_t in_batch = 0;
    for (auto& l : loaders) {
      const auto part = l.next();
      in_batch += part.size();
      seen.insert(part.begin(), part.end());
    }
    CHECK(in_batch == batch);
  }
  CHECK(seen.size() == rows);
  CHECK(std::set<std::uint32_t>(seen.begin(), seen.end()).size() == rows);
  CHECK(loaders[0].cursor().epoch == 0);
  loaders[0].next();
  CHECK(loaders[0].cursor().epoch == 1);
}

TEST_CASE("a rank computing several logical workers reads each one's rows, whatever its block") {
  // 4 logical workers of a 22-row batch (uneven parts), read by blocks of 1, 2, 3 and 4
  // workers: every block gives each worker the rows a loader of that worker alone gives.
  const int rows = 70, batch = 22, logical = 4;
  for (int first = 0; first < logical; ++first) {
    for (int count = 1; first + count <= logical; ++count) {
      Loader block(rows, batch, 0, logical, 9);
      std::vector<Loader> alone;
      for (int l = first; l < first + count; ++l) alone.emplace_back(rows, batch, l, logical, 9);
      for (int step = 0; step < 7; ++step) {  // past an epoch's end (3 batches of 22 in 70)
        const auto parts = block.next_parts(first, count);
        REQUIRE(parts.size() == static_cast<std::size_t>(count));
        for (int j = 0; j < count; ++j) CHECK(parts[static_cast<std::size_t>(j)] == alone[static_cast<std::size_t>(j)].next());
      }
      CHECK(block.cursor() == alone[0].cursor());
    }
  }
  CHECK_THROWS_WITH(Loader(50, 3, 0, 4, 1), Catch::Contains("4 logical workers") && Catch::Contains("--logical-ranks"));
}

TEST_CASE("a restored cursor resumes the exact sequence of batches, across epochs") {
  Loader a(50, 8, 1, 2, 77);
  for (int i = 0; i < 9; ++i) a.next();
  const auto saved = a.cursor().save();
  std::vector<std::vector<std::uint32_t>> expected;
  for (int i = 0; i < 12; ++i) expected.push_back(a.next());
  Loader b(50, 8, 1, 2, 77);
  b.set_cursor(Cursor::restore(saved));
  for (const auto& e : expected) CHECK(b.next() == e);
  CHECK_THROWS_AS(Cursor::restore(std::vector<std::byte>(3)), saker::Error);
  CHECK_THROWS_AS(Loader(50, 1, 0, 2, 1), saker::Error);
  CHECK_THROWS_AS(Loader(50, 51, 0, 1, 1), saker::Error);
}

// Issue 31, item 3: a --data file that cannot work says which file and why (the old message was
// "cannot open: the HDF5 library reported an error" for all of these), and is its own error
// type, on which saker-train exits 3 (saker(7): an input is not usable) and saker-run stops.
TEST_CASE("an unusable data file is named with the reason: missing, a directory, not HDF5, no X/y, unreadable") {
  char tmpl[] = "/tmp/saker-train-data-XXXXXX";
  const std::filesystem::path dir = ::mkdtemp(tmpl);
  const std::string missing = (dir / "nosuch.h5").string();
  CHECK_THROWS_AS(read_dataset(missing), InputUnusable);
  CHECK_THROWS_WITH(read_dataset(missing), Catch::Contains(missing) && Catch::Contains("does not exist") &&
                                               Catch::Contains("saker-train make-data"));
  CHECK_THROWS_WITH(read_dataset((dir / "nodir" / "x.h5").string()), Catch::Contains("does not exist"));
  CHECK_THROWS_AS(read_dataset(dir.string()), InputUnusable);
  CHECK_THROWS_WITH(read_dataset(dir.string()), Catch::Contains("is a directory"));
  const std::string text = (dir / "notes.txt").string();
  { std::ofstream(text) << "not hdf5\n"; }
  CHECK_THROWS_AS(read_dataset(text), InputUnusable);
  CHECK_THROWS_WITH(read_dataset(text), Catch::Contains(text) && Catch::Contains("not an HDF5 file"));
  const std::string empty = (dir / "empty.h5").string();
  H5Fclose(H5Fcreate(empty.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));  // HDF5, without X and y
  CHECK_THROWS_AS(read_dataset(empty), InputUnusable);
  CHECK_THROWS_WITH(read_dataset(empty), Catch::Contains(empty) && Catch::Contains("no datasets X and y"));
  {
    SyntheticSpec spec;
    spec.rows = 4;
    spec.features = 2;
    write_dataset(make_synthetic(spec), (dir / "good.h5").string());
  }
  CHECK_NOTHROW(read_dataset((dir / "good.h5").string()));
  if (::geteuid() != 0) {  // root reads whatever the mode says
    std::filesystem::permissions(dir / "good.h5", std::filesystem::perms::none);
    CHECK_THROWS_AS(read_dataset((dir / "good.h5").string()), InputUnusable);
    CHECK_THROWS_WITH(read_dataset((dir / "good.h5").string()), Catch::Contains("not readable"));
  }
  std::filesystem::remove_all(dir);
}
