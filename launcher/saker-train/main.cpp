// saker-train: the reference data-parallel trainer. `saker-train make-data` writes a
// synthetic HDF5 dataset; `saker-train [train]` trains an MLP on one, allreducing
// gradients through libsaker_comm and checkpointing through libsaker_ckpt.
// All logic lives in launcher/train/; this is the command-line shell.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>

#include "ckpt/policy_guard.hpp"
#include "common/error.hpp"
#include "common/cli.hpp"
#include "common/log.hpp"
#include "launcher/run/heartbeat.hpp"
#include "launcher/train/ckpt_store.hpp"
#include "launcher/train/dataset.hpp"
#include "launcher/train/device.hpp"
#include "launcher/train/goodput.hpp"
#include "launcher/train/mlp.hpp"
#include "launcher/train/progress.hpp"
#include "launcher/train/reducer_choice.hpp"
#include "launcher/train/trainer.hpp"

namespace cli = saker::cli;
using namespace saker::train;

namespace {

constexpr int kExitOk = 0, kExitError = 1, kExitUnusable = 3, kExitPreempted = 75, kExitRefused = 78, kExitAllDamaged = 79;

std::atomic<int> g_stop{0};
void on_preempt(int) { g_stop.store(1); }

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

const cli::Tool& tool() {
  static const cli::Tool t{
      "saker-train",
      "the reference data-parallel trainer (saker-train(1))",
      {{"train", "--data FILE [OPTIONS]",
        "train an MLP classifier on X/y from an HDF5 file, data-parallel over the ranks saker-run starts, resuming "
        "from the newest checkpoint in --ckpt-dir ('train' may be left out). The global batch is split over L "
        "logical workers (--logical-ranks) whose gradients are summed in one canonical order: the weights are the "
        "same bits on any number of ranks up to L, over shared memory, TCP or a GPU, and after a resume on another "
        "number of ranks. SIGTERM, SIGUSR1, SIGINT (Ctrl-C) or saker-run's resize notice ($SAKER_RESIZE_NOTICE) "
        "makes every rank checkpoint at the same step and exit 75.",
        {{"data", "FILE", "HDF5 dataset (saker-train make-data)"},
         {"layers", "W,W...", "hidden layer widths (default 64,64)"},
         {"optimizer", "adam|sgd", "adam (default) or sgd (with momentum)"},
         {"lr", "X", "learning rate (default 0.001)"},
         {"momentum", "X", "SGD momentum (default 0.9)"},
         {"weight-decay", "X", "L2 weight decay (default 0)"},
         {"batch", "N", "global batch, split over the logical workers (default 64)"},
         {"logical-ranks", "L", "logical workers the batch is split over and the gradients summed by, in a fixed "
                                "order (default: the first world size; a resume keeps the checkpoint's L, another "
                                "value is refused, and runs on 1..L ranks)"},
         {"steps", "N", "optimizer steps in total (default 300)"},
         {"seed", "N", "seed of initialisation and data order (default 1)"},
         {"ckpt-dir", "DIR", "checkpoint directory (default: $SAKER_CKPT_DIR; none: no checkpoints)"},
         {"ckpt-every", "N|auto", "checkpoint every N steps (default 50; 0: only on signals), or auto: the interval "
                                  "that loses the least time (Young/Daly, from the measured save cost, the step time "
                                  "and --mtbf or this job's failure history in --ckpt-dir), printed with its inputs"},
         {"mtbf", "SECONDS", "mean seconds between interruptions, for --ckpt-every auto (default: from the failure "
                             "history in --ckpt-dir)"},
         {"keep", "N", "checkpoints to keep (default 3; 0: all)"},
         {"allow-fresh-start", "", "when every checkpoint in --ckpt-dir is damaged, train from step 0 instead of "
                                   "exiting 79"},
         {"ckpt-key", "FILE", "AES-256 key file (mode 0600) encrypting checkpoints (default: $SAKER_CKPT_KEY; none: "
                              "unencrypted)"},
         {"ckpt-mode", "0600|0640", "checkpoint files 0600 (directories 0700), or 0640 (0750) for the group to read "
                                    "(default: $SAKER_CKPT_MODE, else 0600)"},
         {"policy", "FILE", "site policy (saker-policy.yaml(5)) every checkpoint save must pass: residency of the "
                            "lineage, encryption (default: $SAKER_POLICY; none: no rule)"},
         {"device", "auto|gpu|cpu", "where gradients are summed: auto (NCCL on the GPU when built with NCCL and "
                                    "every rank sees a CUDA device, else saker's host ring), gpu (NCCL or fail), cpu "
                                    "(host ring) (default: $SAKER_TRAIN_DEVICE, else auto)"},
         {"log-every", "N", "progress line every N steps (default 25)"},
         {"metrics-file", "FILE", "append 'step=S loss=.. accuracy=.. eval_loss=.. eval_accuracy=..' lines here at "
                                  "every progress line (default: $SAKER_METRICS_FILE; none: no file)"},
         {"step-sleep-ms", "MS", "sleep after each step (demos, fault tests; default 0)"},
         {"lineage", "NAME@VERSION,...", "datasets trained on (default: the job's --dataset, "
                                         "$SLURM_SPANK_SAKER_DATASETS)"}},
        0, 0, ""},
       {"make-data", "--out FILE [OPTIONS]",
        "write a synthetic classification dataset (Gaussian blobs) to an HDF5 file: X float32 [samples x "
        "features], y int32 [samples], attribute 'classes'",
        {{"out", "FILE", "HDF5 file to write"},
         {"samples", "N", "number of rows (default 8192)"},
         {"features", "N", "features per row (default 32)"},
         {"classes", "N", "number of classes (default 4)"},
         {"spread", "X", "blob standard deviation, higher is harder (default 3.0)"},
         {"seed", "N", "random seed (default 1)"},
         {"progress", "", "show progress (count and ETA) even when stderr is not a terminal"}},
        0, 0, ""}},
      "Exit codes (saker(7)): 0 done, 1 error (message on stderr), 2 usage error,\n"
      "3 the --data file is not usable (does not exist, not readable, not HDF5, no X/y; saker-run does not retry it),\n"
      "75 stopped by SIGTERM/SIGUSR1/SIGINT, or by saker-run's resize notice ($SAKER_RESIZE_NOTICE), after a\n"
      "checkpoint (run again, on any number of ranks up to --logical-ranks, or requeue to resume),\n"
      "78 refused, and retrying will not help: a checkpoint refused by the site policy (--policy: wrong\n"
      "zone or no key), or --device gpu where a rank cannot allreduce with NCCL on a GPU,\n"
      "79 every checkpoint in --ckpt-dir is damaged (each named on stderr) and --allow-fresh-start was not given.\n"};
  return t;
}

int as_int(const cli::Args& a, const std::string& name, int fallback, int min) {
  return static_cast<int>(a.number(name, static_cast<std::uint64_t>(fallback), static_cast<std::uint64_t>(min), INT32_MAX));
}

int make_data(const cli::Args& a) {
  SyntheticSpec spec;
  const std::string out = a.required("out");
  spec.rows = as_int(a, "samples", 8192, 1);
  spec.features = as_int(a, "features", 32, 1);
  spec.classes = as_int(a, "classes", 4, 2);
  spec.spread = a.real("spread", 3.0, 0, 1e6);
  spec.seed = a.number("seed", 1);
  CountProgress bar("saker-train: make-data", "rows", a.has("progress"));
  write_dataset(make_synthetic(spec, [&](int done, int total) { bar.update(done, total); }), out);
  std::printf("saker-train: wrote %d x %d samples, %d classes to %s\n", spec.rows, spec.features, spec.classes, out.c_str());
  return kExitOk;
}

// The options that shape one training run; env-var defaults as --help says.
TrainConfig config_of(const cli::Args& a) {
  TrainConfig cfg;
  cfg.optimizer.kind = a.get("optimizer", "adam");
  if (cfg.optimizer.kind != "adam" && cfg.optimizer.kind != "sgd")
    throw cli::UsageError(saker::explain("saker-train: --optimizer is '" + cfg.optimizer.kind + "'", "it is adam or sgd",
                                         "pass --optimizer adam or --optimizer sgd"));
  cfg.optimizer.lr = a.real("lr", 1e-3, 0, 1e6);
  cfg.optimizer.momentum = a.real("momentum", 0.9, 0, 1);
  cfg.optimizer.weight_decay = a.real("weight-decay", 0, 0, 1e6);
  cfg.batch = as_int(a, "batch", 64, 1);
  cfg.logical_ranks = as_int(a, "logical-ranks", 0, 1);
  cfg.steps = a.number("steps", 300);
  cfg.seed = a.number("seed", 1);
  cfg.log_every = std::max<std::uint64_t>(1, a.number("log-every", 25));
  cfg.metrics_file = a.get("metrics-file", env_or("SAKER_METRICS_FILE", ""));
  cfg.step_sleep_ms = as_int(a, "step-sleep-ms", 0, 0);
  cfg.hidden = MlpShape::parse_hidden(a.get("layers", "64,64"));
  cfg.preempt_marker = env_or("SAKER_PREEMPT_MARKER", "");
  cfg.resize_notice = env_or("SAKER_RESIZE_NOTICE", "");
  return cfg;
}

int run_training(const cli::Args& a) {
  const std::string data_path = a.required("data");
  TrainConfig cfg = config_of(a);
  CkptEvery every;
  Device wanted;
  try {
    every = parse_ckpt_every(a.get("ckpt-every", "50"));
    wanted = parse_device(a.get("device", env_or("SAKER_TRAIN_DEVICE", "auto")));
  } catch (const saker::Error& e) {
    throw cli::UsageError(std::string("saker-train: ") + e.what());
  }
  cfg.ckpt_every = every.steps;
  const double mtbf = a.real("mtbf", 0, 1e-3, 1e12);
  if (a.has("mtbf") && !every.automatic)
    throw cli::UsageError(saker::explain("saker-train: --mtbf is given without --ckpt-every auto",
                                         "it only feeds the automatic interval", "add --ckpt-every auto, or drop --mtbf"));
  const std::string ckpt_dir = a.get("ckpt-dir", env_or("SAKER_CKPT_DIR", ""));

  std::signal(SIGTERM, on_preempt);
  std::signal(SIGUSR1, on_preempt);
  // Ctrl-C (the terminal's SIGINT reaches every rank of saker-run --local, and saker-run
  // forwards its own) is a stop like preemption: emergency checkpoint, exit 75.
  std::signal(SIGINT, on_preempt);
  // First heartbeat now, so saker-run's hang detection also watches loading the data and
  // resuming from a checkpoint (a damaged file must not hang a resume forever); the
  // training loop beats every step.
  saker::run::HeartbeatWriter(std::atoi(env_or("SAKER_RANK", "0").c_str())).beat();
  const Dataset data = read_dataset(data_path);
  ReducerChoice choice = make_reducer(wanted);
  std::unique_ptr<Reducer> reducer = std::move(choice.reducer);
  saker::run::HeartbeatWriter(reducer->rank()).phase("rendezvous");  // saker-run's recovery breakdown
  if (reducer->rank() == 0) {
    std::printf("%s\n", choice.line.c_str());
    std::fflush(stdout);
  }
  std::unique_ptr<SnapshotStore> store;
  if (!ckpt_dir.empty()) {
    CkptStoreOptions so;
    so.dir = ckpt_dir;
    so.keep_last = static_cast<unsigned>(a.number("keep", 3, 0, UINT32_MAX));
    so.lineage = a.get("lineage", env_or("SLURM_SPANK_SAKER_DATASETS", env_or("SAKER_DATASETS", "")));
    so.key_file = a.get("ckpt-key", env_or("SAKER_CKPT_KEY", ""));
    so.mode = a.get("ckpt-mode", env_or("SAKER_CKPT_MODE", "0600"));
    so.allow_fresh_start = a.has("allow-fresh-start");
    if (const std::string policy = a.get("policy", env_or("SAKER_POLICY", "")); !policy.empty())
      so.guard = saker::ckpt::PolicyGuard::from_file(policy);
    store = std::make_unique<CkptStore>(so, *reducer);
  }
  std::optional<GoodputSession> goodput;
  if (every.automatic && store) {
    goodput.emplace(mtbf, ckpt_dir, *reducer,
                    restarted_from_env(std::getenv("SAKER_RUN_ATTEMPT"), std::getenv("TORCHELASTIC_RESTART_COUNT"),
                                       std::getenv("SLURM_RESTART_COUNT")));
    cfg.auto_interval = &goodput->interval();
  } else if (every.automatic && reducer->rank() == 0) {
    saker::log::warn("saker-train: --ckpt-every auto has no checkpoints to schedule: there is no --ckpt-dir "
                     "(nor $SAKER_CKPT_DIR); pass one to checkpoint");
  }
  const TrainResult r = train(cfg, data, *reducer, store.get(), &g_stop);
  if (goodput) goodput->finished(r.preempted);
  if (r.preempted) return kExitPreempted;
  if (reducer->rank() == 0) {
    std::printf("saker-train: final loss %.6f accuracy %.4f after %llu steps\n", r.loss, r.accuracy,
                static_cast<unsigned long long>(r.step));
    std::printf("saker-train: weights xxh3_128 %s\n", r.weights_hash.c_str());
  }
  return kExitOk;
}

}  // namespace

// Maps what training throws to saker(7)'s codes, with the message on stderr.
int run(const cli::Command& c, const cli::Args& a) {
  try {
    return c.name == "make-data" ? make_data(a) : run_training(a);
  } catch (const cli::UsageError&) {
    throw;
  } catch (const saker::ckpt::DestinationRefused& e) {
    throw cli::Failure(kExitRefused, std::string("saker-train: ") + e.what());
  } catch (const AllDamaged& e) {
    throw cli::Failure(kExitAllDamaged, std::string("saker-train: ") + e.what());
  } catch (const InputUnusable& e) {
    throw cli::Failure(kExitUnusable, std::string("saker-train: ") + e.what());
  } catch (const DeviceRefused& e) {
    throw cli::Failure(kExitRefused, std::string("saker-train: ") + e.what());
  } catch (const std::exception& e) {
    throw cli::Failure(kExitError, std::string("saker-train: ") + e.what());
  }
}

int main(int argc, char** argv) {
  std::vector<std::string> words(argv + 1, argv + argc);
  // 'train' is the default command: `saker-train --data F` as before.
  if (!words.empty() && (words[0] == "--help" || words[0] == "-h")) {  // the commands, then train's options
    std::cout << cli::usage(tool()) << "\n" << cli::usage(tool(), tool().commands[0]);
    return kExitOk;
  }
  const bool top_level = !words.empty() && words[0] == "--version";
  if (!words.empty() && !top_level && words[0] != "train" && words[0] != "make-data" && words[0].rfind("-", 0) == 0)
    words.insert(words.begin(), "train");
  return cli::main(tool(), words, run, std::cout, std::cerr);
}
