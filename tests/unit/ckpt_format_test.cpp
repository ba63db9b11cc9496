#include <catch2/catch.hpp>

#include <cstdlib>

#include "config.h"
#include "ckpt/commit.hpp"
#include "ckpt/format.hpp"
#include "ckpt_test_util.hpp"
#include "common/error.hpp"

using namespace saker::ckpt;
using namespace saker::ckpt::testing;

TEST_CASE("every dtype round-trips bit for bit, with its shape", "[ckpt][format]") {
  TempDir dir;
  Checkpointer ck(dir.path());
  State st = make_state(5);
  st.tensors.clear();
  std::uint64_t seed = 1;
  for (DType d : kAllDTypes) {
    const std::size_t n = 3 * 5;
    st.tensors.push_back(Tensor::owning("t_" + std::string(dtype_name(d)), d, {3, 5}, random_bytes(n * dtype_size(d), seed++)));
  }
  st.tensors.push_back(Tensor::owning("scalar", DType::f64, {}, random_bytes(8, 99)));
  st.tensors.push_back(Tensor::owning("empty", DType::f32, {0, 7}, {}));
  const SaveReport rep = ck.save(st);
  CHECK(rep.committed);
  CHECK(rep.file == dir / "ckpt-000000000005.h5");

  auto loaded = ck.load_latest();
  REQUIRE(loaded);
  const State& got = loaded->state;
  CHECK(got.step == 5);
  CHECK(got.epoch == 0);
  CHECK(got.config == st.config);
  CHECK(got.lineage == st.lineage);
  CHECK(got.rng_state == st.rng_state);
  CHECK(got.data_cursor == st.data_cursor);
  REQUIRE(got.tensors.size() == st.tensors.size());
  for (const Tensor& t : st.tensors) {
    const Tensor* g = got.find(t.name);
    REQUIRE(g != nullptr);
    CHECK(g->dtype == t.dtype);
    CHECK(g->shape == t.shape);
    CHECK(same_bytes(*g, t));
  }
}

TEST_CASE("root attributes describe the checkpoint", "[ckpt][format]") {
  TempDir dir;
  Checkpointer ck(dir.path());
  State st = make_state(42);
  st.epoch = 3;
  st.config = std::string(100000, 'x');  // bigger than HDF5's 64 KiB compact attribute limit
  ck.save(st);
  const CheckpointInfo info = describe(dir / "ckpt-000000000042.h5");
  CHECK(info.step == 42);
  CHECK(info.epoch == 3);
  CHECK(info.world_size == 1);
  CHECK(info.format_version == 3);
  CHECK(info.config == st.config);
  CHECK(format_lineage(info.lineage) == "imagenet@2012,patients@v3");
  CHECK(info.encryption == "none");
  CHECK(info.saker_version == PACKAGE_VERSION);
  CHECK(std::abs(info.created_unix - static_cast<std::int64_t>(std::time(nullptr))) < 60);
  REQUIRE(info.tensors.size() == 3);
  CHECK(info.tensors[0].xxh3_128.size() == 32);
  CHECK(info.bytes == std::filesystem::file_size(dir / "ckpt-000000000042.h5"));
  CHECK(commit::read_latest(dir.path()) == std::optional<std::string>("ckpt-000000000042.h5"));
}

TEST_CASE("invalid states are refused before anything is written", "[ckpt][format]") {
  TempDir dir;
  Checkpointer ck(dir.path());
  State st = make_state(1);
  SECTION("bad name") { st.tensors[0].name = "a/b"; }
  SECTION("duplicate name") { st.tensors[1].name = st.tensors[0].name; }
  SECTION("size mismatch") { st.tensors[0].shape = {3}; }
  SECTION("rank outside world") { st.rank = 2; }
  CHECK_THROWS_AS(ck.save(st), saker::Error);
  CHECK(list_checkpoints(dir.path()).empty());
}

TEST_CASE("lineage text round-trips and malformed entries are refused", "[ckpt][format]") {
  CHECK(format_lineage(parse_lineage("a@1,b")) == "a@1,b");
  CHECK(parse_lineage("").empty());
  CHECK_THROWS_AS(parse_lineage("a@"), saker::Error);
  CHECK_THROWS_AS(parse_lineage("a,,b"), saker::Error);
  CHECK(dtype_from_name("bfloat16") == DType::bf16);
  CHECK_THROWS_AS(dtype_from_name("float8"), saker::Error);
}

TEST_CASE("file names parse back", "[ckpt][format]") {
  std::uint64_t step = 0;
  std::uint32_t rank = 0;
  CHECK(format::parse_main_file_name(format::main_file_name(123), &step));
  CHECK(step == 123);
  CHECK_FALSE(format::parse_main_file_name(format::shard_file_name(5, 1), &step));
  CHECK(format::parse_shard_file_name(format::shard_file_name(5, 17), &step, &rank));
  CHECK((step == 5 && rank == 17));
  CHECK_FALSE(format::parse_main_file_name(".ckpt-000000000001.h5.tmp.h.1.a", &step));
}

TEST_CASE("h5py and h5dump read a checkpoint without Saker", "[ckpt][format][h5py]") {
  TempDir dir;
  Checkpointer ck(dir.path());
  State st = make_state(7);
  std::vector<float> w{1.5f, -2.0f, 3.25f, 0.0f};
  st.tensors.push_back(Tensor::view_of<float>("w", DType::f32, {2, 2}, w));
  std::vector<std::uint16_t> half{0x3c00, 0xc000};  // 1.0, -2.0 in IEEE half
  st.tensors.push_back(Tensor::view_of<std::uint16_t>("h", DType::f16, {2}, half));
  ck.save(st);
  const std::string file = (dir / "ckpt-000000000007.h5").string();
  const std::string script = dir.path().string() + "/read.py";
  write_file(script,
             "import h5py, sys\n"
             "f = h5py.File(sys.argv[1], 'r')\n"
             "# fixed-length strings (no global heap): h5py gives bytes\n"
             "assert f.attrs['saker_format'] == b'saker-ckpt', f.attrs['saker_format']\n"
             "assert int(f.attrs['step']) == 7\n"
             "assert f.attrs['lineage'] == b'imagenet@2012,patients@v3'\n"
             "w = f['shard_00000/tensors/w']\n"
             "assert w.dtype.name == 'float32' and w.shape == (2, 2), (w.dtype, w.shape)\n"
             "assert w[()].tolist() == [[1.5, -2.0], [3.25, 0.0]], w[()]\n"
             "assert w.attrs['dtype'] == b'float32' and len(w.attrs['xxh3_128']) == 32\n"
             "h = f['shard_00000/tensors/h']\n"
             "assert h.dtype.name == 'float16' and h[()].tolist() == [1.0, -2.0], (h.dtype, h[()])\n"
             "assert f['shard_00000/rng_state'].shape == (40,)\n"
             "print('h5py-ok')\n",
             0644);
  // Debian's h5py is importable only from /usr/bin/python3 (see machine.md).
  const std::string cmd = "/usr/bin/python3 " + script + " " + file + " > " + dir.path().string() + "/out 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream out(dir.path() / "out");
  const std::string text((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
  INFO(text);
  CHECK(rc == 0);
  CHECK(text.find("h5py-ok") != std::string::npos);

  const std::string dump = "h5dump -A " + file + " > " + dir.path().string() + "/dump 2>&1";
  CHECK(std::system(dump.c_str()) == 0);
  std::ifstream d(dir.path() / "dump");
  const std::string dtext((std::istreambuf_iterator<char>(d)), std::istreambuf_iterator<char>());
  CHECK(dtext.find("saker-ckpt") != std::string::npos);
}
