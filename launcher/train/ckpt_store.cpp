#include "launcher/train/ckpt_store.hpp"

#include <array>
#include <cstdio>
#include <random>
#include <cstring>

#include "common/error.hpp"
#include "saker/ckpt.hpp"

namespace saker::train {
namespace {

constexpr const char* kParams = "model.params";
constexpr const char* kOptimizerSteps = "optim.steps";

ckpt::Tensor float_tensor(const std::string& name, const std::vector<float>& values) {
  return ckpt::Tensor::view_of<float>(name, ckpt::DType::f32, {values.size()}, std::span<const float>(values));
}

std::vector<float> floats_of(const ckpt::Tensor& t) {
  const auto values = t.as<float>();
  return {values.begin(), values.end()};
}

}  // namespace

CkptStore::CkptStore(const CkptStoreOptions& o, Reducer& reducer)
    : dir_(o.dir), allow_fresh_start_(o.allow_fresh_start), reducer_(reducer), lineage_(ckpt::parse_lineage(o.lineage)) {
  if (o.guard) {
    // Before any training step and before the directory is created: a refused
    // destination must cost nothing.
    ckpt::check_destination(*o.guard, dir_, lineage_, !o.key_file.empty());
    if (reducer_.rank() == 0)
      std::printf("saker-train: checkpoint destination %s allowed by the site policy for lineage '%s' (%s)\n",
                  dir_.c_str(), ckpt::format_lineage(lineage_).c_str(), o.key_file.empty() ? "unencrypted" : "encrypted");
  }
  ckpt::Options options;
  options.keep_last = o.keep_last;
  options.key_file = o.key_file;
  options.guard = o.guard;
  // Synchronous saves run on the training thread, so the communicator may serve as
  // the barrier: the sum of "my shard failed" flags must be zero on every rank.
  options.barrier = [this](bool my_shard_ok) {
    float failed = my_shard_ok ? 0.0f : 1.0f;
    reducer_.allreduce_sum(std::span<float>(&failed, 1));
    return failed == 0.0f;
  };
  ck_ = std::make_unique<ckpt::Checkpointer>(dir_, options);
}

CkptStore::~CkptStore() = default;

void CkptStore::ensure_run_id() {
  if (!run_id_.empty()) return;
  // 128 random bits from rank 0, as eight 16-bit pieces (exact in float) summed with
  // the other ranks' zeros: the allreduce is the only channel every rank shares.
  std::array<float, 8> pieces{};
  if (reducer_.rank() == 0) {
    std::random_device rd;
    for (float& p : pieces) p = static_cast<float>(rd() & 0xffff);
  }
  reducer_.allreduce_sum(pieces);
  char buf[40];
  int at = 0;
  for (float p : pieces) at += std::snprintf(buf + at, sizeof buf - at, "%04x", static_cast<unsigned>(p));
  run_id_ = buf;
}

void CkptStore::save(const Snapshot& s, bool emergency) {
  ensure_run_id();
  ckpt::State state;
  state.run_id = run_id_;
  state.step = s.step;
  state.epoch = s.epoch;
  state.world_size = static_cast<std::uint32_t>(reducer_.size());
  state.rank = static_cast<std::uint32_t>(reducer_.rank());
  state.config = s.config;
  state.lineage = lineage_;
  state.tensors.push_back(float_tensor(kParams, s.params));
  for (const auto& [name, values] : s.optimizer) state.tensors.push_back(float_tensor(name, values));
  state.tensors.push_back(ckpt::Tensor::view_of<std::uint64_t>(kOptimizerSteps, ckpt::DType::u64, {},
                                                              std::span<const std::uint64_t>(&s.optimizer_steps, 1)));
  state.rng_state = s.rng;
  state.data_cursor = s.cursor;
  const ckpt::SaveReport r = ck_->save(state);
  if (reducer_.rank() == 0) {
    std::printf("saker-train: %s checkpoint of step %llu committed: %s (%.3f s)\n", emergency ? "emergency" : "periodic",
                static_cast<unsigned long long>(s.step), r.file.c_str(), r.write_s);
  }
}

std::optional<Snapshot> CkptStore::load_latest() {
  std::optional<ckpt::LoadReport> r =
      ck_->load_latest(static_cast<std::uint32_t>(reducer_.rank()), static_cast<std::uint32_t>(reducer_.size()));
  if (!r) {
    const auto& damaged = ck_->last_rejected();
    if (!damaged.empty()) {
      std::string list;
      for (const std::string& why : damaged) list += "\n  " + why;
      if (!allow_fresh_start_)
        throw AllDamaged(explain("every checkpoint in " + dir_ + " is damaged (" + std::to_string(damaged.size()) + ")",
                                 "resuming from any of them would load a wrong state:" + list,
                                 "restore an intact checkpoint into the directory, or pass --allow-fresh-start to "
                                 "train from step 0"));
      if (reducer_.rank() == 0)
        std::fprintf(stderr, "saker: warning: saker-train: every checkpoint in %s is damaged; starting from step 0 "
                             "(--allow-fresh-start):%s\n", dir_.c_str(), list.c_str());
    }
    return std::nullopt;
  }
  run_id_ = r->state.run_id;
  for (const std::string& why : r->rejected) std::fprintf(stderr, "saker: warning: saker-train: skipped %s\n", why.c_str());
  const ckpt::State& st = r->state;
  Snapshot s;
  s.step = st.step;
  s.epoch = st.epoch;
  s.config = st.config;
  s.rng = st.rng_state;
  s.cursor = st.data_cursor;
  for (const ckpt::Tensor& t : st.tensors) {
    if (t.name == kParams) {
      s.params = floats_of(t);
    } else if (t.name == kOptimizerSteps) {
      s.optimizer_steps = t.as<std::uint64_t>()[0];
    } else if (t.name.rfind("optim.", 0) == 0) {
      s.optimizer.emplace_back(t.name, floats_of(t));
    }
  }
  if (s.params.empty()) {
    throw Error(explain("checkpoint " + r->file.string() + " has no tensor '" + kParams + "'",
                        "it was not written by saker-train", "point --ckpt-dir at saker-train's own checkpoints"));
  }
  return s;
}

}  // namespace saker::train
