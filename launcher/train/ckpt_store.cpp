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
  options.access = ckpt::parse_access(o.mode);
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
  // Named per-layer tensors (fc1.weight, ..., optim.adam_m.fc1.weight, ...): h5py users
  // see the model's structure. Views into the snapshot: no copies.
  auto add_parts = [&](const std::string& prefix, const std::vector<float>& values) {
    if (s.layout.empty()) {
      state.tensors.push_back(float_tensor(prefix.empty() ? kParams : prefix, values));
      return;
    }
    for (const Snapshot::Part& p : s.layout) {
      std::size_t offset = 0;
      for (const Snapshot::Part& q : s.layout) {
        if (&q == &p) break;
        offset += q.count;
      }
      SAKER_ASSERT(offset + p.count <= values.size(), "the layout tiles the parameters");
      state.tensors.push_back(ckpt::Tensor::view_of<float>((prefix.empty() ? "" : prefix + ".") + p.name, ckpt::DType::f32,
                                                           p.shape, std::span<const float>(values).subspan(offset, p.count)));
    }
  };
  add_parts("", s.params);
  for (const auto& [name, values] : s.optimizer) add_parts(name, values);
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

std::optional<Snapshot> CkptStore::load_latest(const std::string& expected_config) {
  // Another run's intact checkpoint (other settings) is skipped like a damaged one:
  // older checkpoints of this run may still be there.
  std::optional<ckpt::LoadReport> r = ck_->load_latest(
      static_cast<std::uint32_t>(reducer_.rank()), static_cast<std::uint32_t>(reducer_.size()),
      [&](const ckpt::LoadReport& got) {
        if (!same_run(got.state.config, expected_config))
          throw Error(explain(got.file.string() + " belongs to another run (" + got.state.config + ")",
                              "this run is " + expected_config, "move it out of the checkpoint directory"));
      });
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
  // Flat (older saves: model.params, optim.X) or named per layer (fc1.weight, ...,
  // optim.X.fc1.weight, ...): parts are concatenated in the order they were saved.
  auto append = [](std::vector<float>& to, const ckpt::Tensor& t) {
    const auto v = t.as<float>();
    to.insert(to.end(), v.begin(), v.end());
  };
  for (const ckpt::Tensor& t : st.tensors) {
    if (t.name == kOptimizerSteps) {
      s.optimizer_steps = t.as<std::uint64_t>()[0];
    } else if (t.name == kParams || t.name.rfind("fc", 0) == 0) {
      append(s.params, t);
    } else if (t.name.rfind("optim.", 0) == 0) {
      const std::size_t dot = t.name.find('.', 6);
      const std::string buffer = t.name.substr(0, dot);
      if (s.optimizer.empty() || s.optimizer.back().first != buffer) s.optimizer.emplace_back(buffer, std::vector<float>{});
      append(s.optimizer.back().second, t);
    }
  }
  if (s.params.empty()) {
    throw Error(explain("checkpoint " + r->file.string() + " has no parameters (fc1.weight, ... or " + kParams + ")",
                        "it was not written by saker-train", "point --ckpt-dir at saker-train's own checkpoints"));
  }
  return s;
}

}  // namespace saker::train
