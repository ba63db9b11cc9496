#include <catch2/catch.hpp>

#include <cstring>

#include "ckpt_test_util.hpp"
#include "common/error.hpp"

using namespace saker::ckpt;
using namespace saker::ckpt::testing;

TEST_CASE("save_async snapshots the state: later changes do not leak into the checkpoint", "[ckpt][async]") {
  TempDir dir;
  Checkpointer ck(dir.path());
  std::vector<float> weights(1 << 16, 1.0f);
  State st = make_state(1);
  st.tensors.push_back(Tensor::view_of<float>("big", DType::f32, {weights.size()}, weights));
  SaveHandle h = ck.save_async(st);
  CHECK(h.valid());
  CHECK(h.stall_s() > 0);
  std::fill(weights.begin(), weights.end(), 2.0f);  // training goes on while the writer runs
  const SaveReport rep = h.wait();
  CHECK(rep.committed);
  CHECK(rep.stall_s == h.stall_s());
  CHECK(rep.bytes > weights.size() * 4);
  auto got = ck.load_latest();
  REQUIRE(got);
  auto big = got->state.find("big")->as<float>();
  CHECK(std::all_of(big.begin(), big.end(), [](float v) { return v == 1.0f; }));
}

TEST_CASE("at most one save in flight: the next save waits for the previous one", "[ckpt][async]") {
  TempDir dir;
  Options o;
  o.keep_last = 0;
  Checkpointer ck(dir.path(), o);
  std::vector<SaveHandle> handles;
  for (std::uint64_t s = 1; s <= 5; ++s) {
    handles.push_back(ck.save_async(make_state(s, 1 << 15)));
    // Starting save s waited for save s-1 to finish.
    if (s > 1) CHECK(handles[s - 2].done());
  }
  CHECK(ck.save(make_state(6)).committed);  // a synchronous save also waits first
  CHECK(handles.back().done());
  CHECK(list_checkpoints(dir.path()).size() == 6);
  auto got = ck.load_latest();
  REQUIRE(got);
  CHECK(got->state.step == 6);
}

TEST_CASE("a failed background write is reported by wait()", "[ckpt][async]") {
  TempDir dir;
  Checkpointer ck(dir / "ckpt");
  std::filesystem::remove_all(dir / "ckpt");  // the directory vanishes under the writer
  SaveHandle h = ck.save_async(make_state(1));
  CHECK_THROWS_AS(h.wait(), saker::Error);
  CHECK_THROWS_AS(ck.wait(), saker::Error);
  CHECK_FALSE(ck.wait().has_value());  // reported once
}
