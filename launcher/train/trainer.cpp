#include "launcher/train/trainer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "common/error.hpp"
#include "common/file.hpp"
#include "common/hash.hpp"
#include "launcher/comm/ordered_reduce.hpp"
#include "launcher/train/goodput.hpp"
#include "launcher/train/loader.hpp"
#include "launcher/train/metrics_file.hpp"
#include "launcher/train/mlp.hpp"
#include "launcher/run/heartbeat.hpp"
#include "launcher/train/progress.hpp"
#include "launcher/train/rng.hpp"

namespace saker::train {

// The preemption marker tells saker-run to requeue: 0600, and never written through a
// symbolic link or into a file another user planted at its path (common/file.hpp).
static void write_marker(const std::string& path, std::uint64_t step) {
  std::string why;
  const int fd = file::open_private(path, O_TRUNC, 0600, &why);
  const std::string text = std::to_string(step) + "\n";
  if (fd < 0 || ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size()))
    std::fprintf(stderr, "saker-train: cannot write the preemption marker %s: %s (fix: remove that file; saker-run "
                 "keeps it in its private run directory)\n", path.c_str(), fd < 0 ? why.c_str() : "short write");
  if (fd >= 0) ::close(fd);
}

std::string TrainConfig::record(const Dataset& data, int world, int logical) const {
  std::string hidden_text;
  for (int h : hidden) hidden_text += (hidden_text.empty() ? "" : ",") + std::to_string(h);
  char lr[32];
  std::snprintf(lr, sizeof lr, "%.17g", optimizer.lr);
  return "{\"model\":\"mlp\",\"shape\":\"" + MlpShape{data.features, hidden, data.classes}.str() +
         "\",\"optimizer\":\"" + optimizer.kind + "\",\"lr\":" + lr + ",\"batch\":" + std::to_string(batch) +
         ",\"seed\":" + std::to_string(seed) + ",\"rows\":" + std::to_string(data.rows) +
         ",\"world_size\":" + std::to_string(world) + ",\"logical_ranks\":" + std::to_string(logical) + "}";
}

namespace {

// The record without the integer field `key` (",\"world_size\":4").
std::string without(std::string record, const std::string& key) {
  const std::size_t at = record.find(key);
  if (at == std::string::npos) return record;
  std::size_t end = at + key.size();
  while (end < record.size() && std::isdigit(static_cast<unsigned char>(record[end]))) ++end;
  return record.erase(at, end - at);
}

int integer_field(const std::string& record, const std::string& key) {
  const std::size_t at = record.find(key);
  if (at == std::string::npos) return 0;
  return std::atoi(record.c_str() + at + key.size());
}

const char* const kWorld = ",\"world_size\":";
const char* const kLogical = ",\"logical_ranks\":";

}  // namespace

bool same_run(const std::string& saved, const std::string& current) {
  // Records from before the canonical order named NCCL's summation ("allreduce":"nccl");
  // such a run continues like any other, now in the canonical order.
  auto key = [](std::string r) {
    const std::string nccl = ",\"allreduce\":\"nccl\"";
    if (const std::size_t at = r.find(nccl); at != std::string::npos) r.erase(at, nccl.size());
    return without(without(r, kWorld), kLogical);
  };
  return key(saved) == key(current);
}

int logical_ranks_of(const std::string& record) {
  const int logical = integer_field(record, kLogical);
  return logical > 0 ? logical : integer_field(record, kWorld);
}

int resize_notice_size(const std::string& path) {
  // stat first: the common case (no notice) costs one system call per step.
  if (path.empty() || ::access(path.c_str(), F_OK) != 0) return -1;
  char text[32] = {};
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return 0;  // there, but unreadable: still a notice
  const ssize_t got = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  return got > 0 ? std::max(0, std::atoi(text)) : 0;
}

void SoloReducer::sum_logical(int logical, std::span<float* const> parts, std::size_t count, float* out) {
  SAKER_ASSERT(static_cast<int>(parts.size()) == logical, "one rank computes every logical worker");
  std::vector<const float*> in(parts.begin(), parts.end());
  comm::canonical_sum(in, count, out);
}

namespace {

Snapshot take_snapshot(std::uint64_t step, const Loader& loader, const Mlp& model, Optimizer& opt, const Rng& rng,
                       const std::string& record) {
  Snapshot s;
  s.step = step;
  s.epoch = loader.cursor().epoch;
  s.params.assign(model.parameters().begin(), model.parameters().end());
  for (auto& [name, buffer] : opt.buffers()) s.optimizer.emplace_back(name, *buffer);
  s.optimizer_steps = opt.steps_taken;
  s.rng = rng.save();
  s.cursor = loader.cursor().save();
  s.config = record;
  for (const NamedParameter& p : model.named_parameters()) s.layout.push_back({p.name, p.shape, p.count});
  return s;
}

void restore_snapshot(const Snapshot& s, Loader& loader, Mlp& model, Optimizer& opt, Rng& rng,
                      const std::string& record, const std::string& where) {
  if (!same_run(s.config, record)) {
    throw Error(explain("checkpoint in " + where + " belongs to another run (" + s.config + ")",
                        "this run is " + record + "; resuming it would not continue the same run",
                        "use a fresh --ckpt-dir or the original settings"));
  }
  if (s.params.size() != model.parameter_count()) {
    throw Error(explain("checkpoint in " + where + " holds " + std::to_string(s.params.size()) + " parameters",
                        "the model has " + std::to_string(model.parameter_count()), "use the original --layers"));
  }
  std::copy(s.params.begin(), s.params.end(), model.parameters().begin());
  for (auto& [name, buffer] : opt.buffers()) {
    bool found = false;
    for (const auto& [saved_name, saved] : s.optimizer) {
      if (saved_name == name && saved.size() == buffer->size()) {
        *buffer = saved;
        found = true;
      }
    }
    if (!found) {
      throw Error(explain("checkpoint in " + where + " has no optimizer state '" + name + "'",
                          "it was written with another optimizer", "use the original --optimizer"));
    }
  }
  opt.steps_taken = s.optimizer_steps;
  rng.restore(s.rng);
  loader.set_cursor(Cursor::restore(s.cursor));
}

// L for this run: an explicit --logical-ranks, else the resumed checkpoint's, else the
// world size. Refuses another explicit L than the checkpoint's, and more ranks than L.
int choose_logical(const TrainConfig& cfg, const std::optional<Snapshot>& resumed, int world,
                   const std::string& where) {
  int logical = cfg.logical_ranks > 0 ? cfg.logical_ranks : world;
  const int saved = resumed ? logical_ranks_of(resumed->config) : 0;
  if (cfg.logical_ranks > 0 && saved > 0 && saved != cfg.logical_ranks) {
    throw Error(explain("--logical-ranks " + std::to_string(cfg.logical_ranks),
                        "the checkpoint in " + where + " was trained with " + std::to_string(saved) +
                            " logical workers, and another count sums the gradients in another order (not the same run)",
                        "leave --logical-ranks out (a resume keeps the checkpoint's) or use a fresh --ckpt-dir"));
  }
  if (saved > 0) logical = saved;
  if (world > logical) {
    throw Error(explain(std::to_string(world) + " ranks for " + std::to_string(logical) + " logical workers",
                        "every rank computes at least one logical worker (one with none could not vote on a stop)",
                        "run on at most " + std::to_string(logical) +
                            " ranks, or start a new run (fresh --ckpt-dir) with a larger --logical-ranks"));
  }
  return logical;
}

// One step's work on this rank: each of its logical workers' gradient, from zero over
// that worker's rows, then the canonical sum with every other rank's workers. A part
// and the sum hold [gradient (n), loss sum, correct count, stop votes, resize votes];
// the votes ride in the rank's first worker, so all ranks stop at the same step.
class StepSum {
 public:
  static constexpr std::size_t kExtra = 4;
  StepSum(const comm::LogicalMap& map, int rank, std::size_t n)
      : logical_(map.logical()), first_(map.first(rank)), n_(n),
        parts_(static_cast<std::size_t>(map.count(rank)), std::vector<float>(n + kExtra)), sum_(n + kExtra) {
    for (auto& p : parts_) ptrs_.push_back(p.data());
  }

  std::span<float> run(const Mlp& model, const Dataset& data, Loader& loader, Reducer& reducer, bool stop,
                       bool resize) {
    const auto rows = loader.next_parts(first_, static_cast<int>(parts_.size()));
    for (std::size_t j = 0; j < parts_.size(); ++j) {
      const std::vector<std::uint32_t>& mine = rows[j];
      xs_.resize(mine.size() * data.features);
      ys_.resize(mine.size());
      for (std::size_t i = 0; i < mine.size(); ++i) {
        std::copy_n(&data.x[static_cast<std::size_t>(mine[i]) * data.features], data.features, &xs_[i * data.features]);
        ys_[i] = data.y[mine[i]];
      }
      std::vector<float>& part = parts_[j];
      std::fill(part.begin(), part.end(), 0.0f);
      const BatchStats local = model.accumulate_gradient(xs_.data(), ys_.data(), static_cast<int>(mine.size()),
                                                         std::span<float>(part.data(), n_));
      part[n_] = static_cast<float>(local.loss_sum);
      part[n_ + 1] = static_cast<float>(local.correct);
    }
    parts_[0][n_ + 2] = stop ? 1.0f : 0.0f;
    parts_[0][n_ + 3] = resize ? 1.0f : 0.0f;
    reducer.sum_logical(logical_, ptrs_, n_ + kExtra, sum_.data());
    return sum_;
  }

 private:
  int logical_, first_;
  std::size_t n_;
  std::vector<std::vector<float>> parts_;
  std::vector<float*> ptrs_;
  std::vector<float> sum_, xs_;
  std::vector<std::int32_t> ys_;
};

// The stop line, or the refusal when there is nowhere to save.
void announce_stop(const TrainConfig& cfg, bool leader, std::uint64_t step, bool resized, int world,
                   const SnapshotStore* store) {
  const std::string at = std::to_string(step);
  if (store == nullptr) {
    throw Error(explain(std::string(resized ? "resize notice" : "preemption signal") + " at step " + at,
                        "there is no checkpoint directory to save to", "pass --ckpt-dir (or saker-run --ckpt-dir)"));
  }
  if (!leader) return;
  if (resized) {
    const int size = resize_notice_size(cfg.resize_notice);
    std::printf("saker-train: resize notice %s (world size %s, now %d): checkpoint at step %s\n",
                cfg.resize_notice.c_str(), size > 0 ? std::to_string(size).c_str() : "unread", world, at.c_str());
  } else {
    std::printf("saker-train: stop signal (preemption, SIGTERM, SIGUSR1 or SIGINT): emergency checkpoint at step %s\n",
                at.c_str());
  }
}

// Whether this rank sees a resize notice asking for another world size than `world`.
bool resize_asked(const std::string& notice, int world) {
  if (notice.empty()) return false;
  const int size = resize_notice_size(notice);
  return size >= 0 && size != world;
}

}  // namespace

TrainResult train(const TrainConfig& cfg, const Dataset& data, Reducer& reducer, SnapshotStore* store,
                  const std::atomic<int>* stop) {
  const int rank = reducer.rank(), world = reducer.size();
  const bool leader = rank == 0;
  Mlp model(MlpShape{data.features, cfg.hidden, data.classes});
  auto opt = make_optimizer(cfg.optimizer, model.parameter_count());
  Rng rng(cfg.seed);
  model.initialize(rng);

  TrainResult result;
  std::uint64_t step = 0;
  std::optional<Snapshot> resumed;
  if (store != nullptr)
    resumed = store->load_latest(cfg.record(data, world, cfg.logical_ranks > 0 ? cfg.logical_ranks : world));
  const int logical = choose_logical(cfg, resumed, world, store != nullptr ? store->describe() : "");
  const std::string record = cfg.record(data, world, logical);
  const comm::LogicalMap map(logical, world);
  Loader loader(data.rows, cfg.batch, 0, logical, cfg.seed);
  result.logical_ranks = logical;
  run::HeartbeatWriter heartbeat(rank);  // saker-run's hang detection (a beat per step) and recovery breakdown
  if (resumed) {
    restore_snapshot(*resumed, loader, model, *opt, rng, record, store->describe());
    step = result.resumed_from = resumed->step;
    if (leader) std::printf("saker-train: resumed from checkpoint step %llu (epoch %llu) in %s\n",
                            static_cast<unsigned long long>(step), static_cast<unsigned long long>(resumed->epoch),
                            store->describe().c_str());
  }
  if (leader) {
    std::printf("saker-train: mlp %s, %zu parameters, %s, global batch %d over %d rank(s) as %d logical worker(s) "
                "(rank 0: %s; canonical summation order), %llu steps, seed %llu\n",
                model.shape().str().c_str(), model.parameter_count(), cfg.optimizer.kind.c_str(), cfg.batch, world,
                logical, map.describe(0).c_str(), static_cast<unsigned long long>(cfg.steps),
                static_cast<unsigned long long>(cfg.seed));
    std::fflush(stdout);
  }

  const std::size_t n = model.parameter_count();
  StepSum step_sum(map, rank, n);
  Progress progress(cfg.steps, static_cast<std::uint64_t>(cfg.batch), step);
  heartbeat.phase("restored");  // the model and optimizer hold the checkpoint's state (or the initial one)
  bool first_after_resume = result.resumed_from > 0;
  std::optional<MetricsFile> metrics;
  if (leader && !cfg.metrics_file.empty()) metrics.emplace(cfg.metrics_file);
  while (step < cfg.steps) {
    const std::span<float> buffer = step_sum.run(model, data, loader, reducer, stop != nullptr && stop->load() != 0,
                                                 resize_asked(cfg.resize_notice, world));
    const float inv_batch = 1.0f / static_cast<float>(cfg.batch);
    for (std::size_t i = 0; i < n; ++i) buffer[i] *= inv_batch;
    opt->step(model.parameters(), std::span<const float>(buffer.data(), n));
    ++step;
    heartbeat.beat();
    if (step == result.resumed_from + 1) heartbeat.phase("first-step");

    if (leader) {
      if (first_after_resume) {
        std::printf("saker-train: first step after resume: step %llu at %.3f\n", static_cast<unsigned long long>(step),
                    std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
        first_after_resume = false;
      }
      if (step % cfg.log_every == 0 || step == cfg.steps) {
        std::printf("%s\n", progress.line(step, buffer[n] * inv_batch, buffer[n + 1] * inv_batch).c_str());
        if (metrics) {
          // The whole dataset too: one batch's loss is too noisy to compare trials by.
          const BatchStats all = model.evaluate(data.x.data(), data.y.data(), data.rows);
          metrics->append(step, {{"loss", buffer[n] * inv_batch},
                                 {"accuracy", buffer[n + 1] * inv_batch},
                                 {"eval_loss", all.loss_sum / all.rows},
                                 {"eval_accuracy", static_cast<double>(all.correct) / all.rows}});
        }
      }
      std::fflush(stdout);
    }
    if (buffer[n + 2] > 0.0f || buffer[n + 3] > 0.0f) {
      // Every rank saw the same votes in the same sum: all save this step.
      result.resized = buffer[n + 3] > 0.0f;
      announce_stop(cfg, leader, step, result.resized, world, store);
      store->save(take_snapshot(step, loader, model, *opt, rng, record), true);
      if (leader && !cfg.preempt_marker.empty()) write_marker(cfg.preempt_marker, step);
      if (leader) std::printf("saker-train: %s checkpoint of step %llu committed; exiting 75 (running again, or the requeued job, resumes from it)\n",
                              result.resized ? "resize" : "emergency", static_cast<unsigned long long>(step));
      std::fflush(stdout);
      result.preempted = true;
      result.step = step;
      const auto params = model.parameters();
      result.weights_hash = hash::xxh3_128(params.data(), params.size_bytes()).hex();
      return result;
    }
    // The final step is saved too: a finished run's checkpoint is its result.
    const bool periodic = cfg.auto_interval != nullptr ? cfg.auto_interval->due(step)
                                                       : cfg.ckpt_every > 0 && step % cfg.ckpt_every == 0;
    if (store != nullptr && (periodic || step == cfg.steps)) {
      const double began = AutoInterval::wall_seconds();
      store->save(take_snapshot(step, loader, model, *opt, rng, record), false);
      if (cfg.auto_interval != nullptr) cfg.auto_interval->saved(step, AutoInterval::wall_seconds() - began);
    }
    if (cfg.step_sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(cfg.step_sleep_ms));
  }

  const BatchStats all = model.evaluate(data.x.data(), data.y.data(), data.rows);
  result.step = step;
  result.loss = all.loss_sum / all.rows;
  result.accuracy = static_cast<double>(all.correct) / all.rows;
  const auto params = model.parameters();
  result.weights_hash = hash::xxh3_128(params.data(), params.size_bytes()).hex();
  return result;
}

}  // namespace saker::train
