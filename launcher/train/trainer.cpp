#include "launcher/train/trainer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <thread>

#include "common/error.hpp"
#include "common/file.hpp"
#include "common/hash.hpp"
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

std::string TrainConfig::record(const Dataset& data, int world) const {
  std::string hidden_text;
  for (int h : hidden) hidden_text += (hidden_text.empty() ? "" : ",") + std::to_string(h);
  char lr[32];
  std::snprintf(lr, sizeof lr, "%.17g", optimizer.lr);
  return "{\"model\":\"mlp\",\"shape\":\"" + MlpShape{data.features, hidden, data.classes}.str() +
         "\",\"optimizer\":\"" + optimizer.kind + "\",\"lr\":" + lr + ",\"batch\":" + std::to_string(batch) +
         ",\"seed\":" + std::to_string(seed) + ",\"rows\":" + std::to_string(data.rows) +
         ",\"world_size\":" + std::to_string(world) +
         (reduction.empty() ? std::string() : ",\"allreduce\":\"" + reduction + "\"") + "}";
}

namespace {

std::string without_world(std::string record) {
  const std::string key = ",\"world_size\":";
  const std::size_t at = record.find(key);
  if (at == std::string::npos) return record;
  std::size_t end = at + key.size();
  while (end < record.size() && std::isdigit(static_cast<unsigned char>(record[end]))) ++end;
  return record.erase(at, end - at);
}

}  // namespace

bool same_run(const std::string& saved, const std::string& current) {
  return without_world(saved) == without_world(current);
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

}  // namespace

TrainResult train(const TrainConfig& cfg, const Dataset& data, Reducer& reducer, SnapshotStore* store,
                  const std::atomic<int>* stop) {
  const int rank = reducer.rank(), world = reducer.size();
  const bool leader = rank == 0;
  const std::string record = cfg.record(data, world);
  Mlp model(MlpShape{data.features, cfg.hidden, data.classes});
  auto opt = make_optimizer(cfg.optimizer, model.parameter_count());
  Loader loader(data.rows, cfg.batch, rank, world, cfg.seed);
  Rng rng(cfg.seed);
  model.initialize(rng);

  TrainResult result;
  std::uint64_t step = 0;
  if (store != nullptr) {
    if (std::optional<Snapshot> s = store->load_latest(record)) {
      restore_snapshot(*s, loader, model, *opt, rng, record, store->describe());
      step = result.resumed_from = s->step;
      if (leader) std::printf("saker-train: resumed from checkpoint step %llu (epoch %llu) in %s\n",
                              static_cast<unsigned long long>(step), static_cast<unsigned long long>(s->epoch),
                              store->describe().c_str());
    }
  }
  if (leader) {
    std::printf("saker-train: mlp %s, %zu parameters, %s, global batch %d over %d rank(s), %llu steps, seed %llu\n",
                model.shape().str().c_str(), model.parameter_count(), cfg.optimizer.kind.c_str(), cfg.batch, world,
                static_cast<unsigned long long>(cfg.steps), static_cast<unsigned long long>(cfg.seed));
    std::fflush(stdout);
  }

  const std::size_t n = model.parameter_count();
  std::vector<float> buffer(n + 3);  // gradient sum, loss sum, correct count, stop flag
  std::vector<float> xs;
  std::vector<std::int32_t> ys;
  Progress progress(cfg.steps, static_cast<std::uint64_t>(cfg.batch), step);
  run::HeartbeatWriter heartbeat(rank);  // saker-run's hang detection: one beat per step
  bool first_after_resume = result.resumed_from > 0;
  std::optional<MetricsFile> metrics;
  if (leader && !cfg.metrics_file.empty()) metrics.emplace(cfg.metrics_file);
  while (step < cfg.steps) {
    const std::vector<std::uint32_t> rows = loader.next();
    xs.resize(rows.size() * data.features);
    ys.resize(rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i) {
      std::copy_n(&data.x[static_cast<std::size_t>(rows[i]) * data.features], data.features, &xs[i * data.features]);
      ys[i] = data.y[rows[i]];
    }
    std::fill(buffer.begin(), buffer.end(), 0.0f);
    const BatchStats local = model.accumulate_gradient(xs.data(), ys.data(), static_cast<int>(rows.size()),
                                                       std::span<float>(buffer.data(), n));
    buffer[n] = static_cast<float>(local.loss_sum);
    buffer[n + 1] = static_cast<float>(local.correct);
    buffer[n + 2] = (stop != nullptr && stop->load() != 0) ? 1.0f : 0.0f;
    reducer.allreduce_sum(buffer);
    const float inv_batch = 1.0f / static_cast<float>(cfg.batch);
    for (std::size_t i = 0; i < n; ++i) buffer[i] *= inv_batch;
    opt->step(model.parameters(), std::span<const float>(buffer.data(), n));
    ++step;
    heartbeat.beat();

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
    if (buffer[n + 2] > 0.0f) {
      // Every rank saw the same flag in the same allreduce: all save this step.
      if (leader) std::printf("saker-train: stop signal (preemption, SIGTERM, SIGUSR1 or SIGINT): emergency checkpoint at step %llu\n",
                              static_cast<unsigned long long>(step));
      if (store == nullptr) throw Error(explain("preemption signal at step " + std::to_string(step),
                                                "there is no checkpoint directory to save to",
                                                "pass --ckpt-dir (or saker-run --ckpt-dir)"));
      store->save(take_snapshot(step, loader, model, *opt, rng, record), true);
      if (leader && !cfg.preempt_marker.empty()) write_marker(cfg.preempt_marker, step);
      if (leader) std::printf("saker-train: emergency checkpoint of step %llu committed; exiting 75 (running again, or the requeued job, resumes from it)\n",
                              static_cast<unsigned long long>(step));
      std::fflush(stdout);
      result.preempted = true;
      result.step = step;
      return result;
    }
    // The final step is saved too: a finished run's checkpoint is its result.
    if (store != nullptr && ((cfg.ckpt_every > 0 && step % cfg.ckpt_every == 0) || step == cfg.steps)) {
      store->save(take_snapshot(step, loader, model, *opt, rng, record), false);
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
