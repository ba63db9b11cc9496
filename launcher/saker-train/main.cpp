// saker-train: the reference data-parallel trainer. `saker-train make-data` writes a
// synthetic HDF5 dataset; `saker-train [train]` trains an MLP on one, allreducing
// gradients through libsaker_comm and checkpointing through libsaker_ckpt.
// All logic lives in launcher/train/; this is the command-line shell.
#include <atomic>
#include <boost/program_options.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>

#include "ckpt/policy_guard.hpp"
#include "common/error.hpp"
#include "common/version.hpp"
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

namespace po = boost::program_options;
using namespace saker::train;

namespace {

constexpr int kExitOk = 0, kExitError = 1, kExitUsage = 2, kExitUnusable = 3, kExitPreempted = 75, kExitRefused = 78, kExitAllDamaged = 79;

std::atomic<int> g_stop{0};
void on_preempt(int) { g_stop.store(1); }

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

const char* kMakeDataExitCodes = "Exit codes (saker(7)): 0 written, 1 error (message on stderr), 2 usage error.\n";
const char* kExitCodes =
    "Exit codes (saker(7)): 0 done, 1 error (message on stderr), 2 usage error,\n"
    "3 the --data file is not usable (does not exist, not readable, not HDF5, no X/y; saker-run does not retry it),\n"
    "75 stopped by SIGTERM/SIGUSR1/SIGINT, or by saker-run's resize notice ($SAKER_RESIZE_NOTICE), after a\n"
    "checkpoint (run again, on any number of ranks up to --logical-ranks, or requeue to resume),\n"
    "78 refused, and retrying will not help: a checkpoint refused by the site policy (--policy: wrong\n"
    "zone or no key), or --device gpu where a rank cannot allreduce with NCCL on a GPU,\n"
    "79 every checkpoint in --ckpt-dir is damaged (each named on stderr) and --allow-fresh-start was not given.\n";

// Parses args against d; prints the help (with the exit codes) and returns false on --help.
bool parse_options(const std::vector<std::string>& args, const po::options_description& d,
                   const char* exit_codes = kExitCodes) {
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(d).run(), vm);
  if (vm.count("help")) {
    std::cout << d << "\n" << exit_codes;
    return false;
  }
  po::notify(vm);
  return true;
}

int make_data(const std::vector<std::string>& args) {
  SyntheticSpec spec;
  std::string out;
  bool progress = false;
  po::options_description d("Usage: saker-train make-data --out FILE [OPTIONS]\n\n"
                            "Writes a synthetic classification dataset (Gaussian blobs) to an HDF5 file:\n"
                            "X float32 [samples x features], y int32 [samples], attribute 'classes'.\n\nOptions");
  d.add_options()("help,h", "print this help")
      ("out,o", po::value<std::string>(&out)->required(), "HDF5 file to write")
      ("samples", po::value<int>(&spec.rows)->default_value(8192), "number of rows")
      ("features", po::value<int>(&spec.features)->default_value(32), "features per row")
      ("classes", po::value<int>(&spec.classes)->default_value(4), "number of classes")
      ("spread", po::value<double>(&spec.spread)->default_value(3.0), "blob standard deviation (higher: harder)")
      ("seed", po::value<std::uint64_t>(&spec.seed)->default_value(1), "random seed")
      ("progress", po::bool_switch(&progress), "show progress (count and ETA) even when stderr is not a terminal");
  if (!parse_options(args, d, kMakeDataExitCodes)) return kExitOk;
  CountProgress bar("saker-train: make-data", "rows", progress);
  write_dataset(make_synthetic(spec, [&](int done, int total) { bar.update(done, total); }), out);
  std::printf("saker-train: wrote %d x %d samples, %d classes to %s\n", spec.rows, spec.features, spec.classes, out.c_str());
  return kExitOk;
}

int run_training(const std::vector<std::string>& args) {
  TrainConfig cfg;
  std::string data_path, layers = "64,64", ckpt_dir = env_or("SAKER_CKPT_DIR", "");
  std::string policy_file = env_or("SAKER_POLICY", ""), key_file = env_or("SAKER_CKPT_KEY", "");
  std::string ckpt_mode = env_or("SAKER_CKPT_MODE", "0600");
  std::string lineage = env_or("SLURM_SPANK_SAKER_DATASETS", env_or("SAKER_DATASETS", ""));
  std::string device = env_or("SAKER_TRAIN_DEVICE", "auto");
  unsigned keep = 3;
  bool allow_fresh_start = false;
  std::string ckpt_every = "50";
  double mtbf = 0;
  po::options_description d("Usage: saker-train [train] --data FILE [OPTIONS]\n"
                            "       saker-train make-data --out FILE [OPTIONS]   (a synthetic dataset to train on;\n"
                            "                                                     see saker-train make-data --help)\n\n"
                            "Trains an MLP classifier on X/y from an HDF5 file, data-parallel over the ranks\n"
                            "saker-run starts, resuming from the newest checkpoint in --ckpt-dir. The global batch\n"
                            "is split over L logical workers (--logical-ranks); the ranks compute them in\n"
                            "contiguous blocks and sum their gradients in one canonical order, so the weights\n"
                            "are the same bits on any number of ranks up to L, over shared memory, TCP or with\n"
                            "a GPU, and after a resume on another number of ranks.\n"
                            "When the file $SAKER_RESIZE_NOTICE (set by saker-run) appears naming another world\n"
                            "size, every rank stops at the same step, checkpoints and exits 75.\n"
                            "SIGTERM, SIGUSR1 or SIGINT (Ctrl-C) makes every rank take an emergency checkpoint and exit 75.\n\nOptions");
  d.add_options()("help,h", "print this help")
      ("data", po::value<std::string>(&data_path)->required(), "HDF5 dataset (saker-train make-data)")
      ("layers", po::value<std::string>(&layers)->default_value(layers), "hidden layer widths, e.g. 64,64")
      ("optimizer", po::value<std::string>(&cfg.optimizer.kind)->default_value("adam"), "adam or sgd (with momentum)")
      ("lr", po::value<double>(&cfg.optimizer.lr)->default_value(1e-3), "learning rate")
      ("momentum", po::value<double>(&cfg.optimizer.momentum)->default_value(0.9, "0.9"), "SGD momentum")
      ("weight-decay", po::value<double>(&cfg.optimizer.weight_decay)->default_value(0), "L2 weight decay")
      ("batch", po::value<int>(&cfg.batch)->default_value(64), "global batch (split over the logical workers)")
      ("logical-ranks", po::value<int>(&cfg.logical_ranks)->default_value(0, "first world size"),
       "logical workers L the batch is split over and the gradients summed by, in a fixed order; a resume keeps "
       "the checkpoint's L (another value is refused) and runs on 1..L ranks")
      ("steps", po::value<std::uint64_t>(&cfg.steps)->default_value(300), "optimizer steps in total")
      ("seed", po::value<std::uint64_t>(&cfg.seed)->default_value(1), "seed of initialisation and data order")
      ("ckpt-dir", po::value<std::string>(&ckpt_dir), "checkpoint directory (default: $SAKER_CKPT_DIR; none: no checkpoints)")
      ("ckpt-every", po::value<std::string>(&ckpt_every)->default_value(ckpt_every),
       "checkpoint every N steps (0: only on signals), or auto: the interval that loses the least time "
       "(Young/Daly, from the measured save cost, step time and --mtbf or this job's failure history "
       "in --ckpt-dir), printed with its inputs")
      ("mtbf", po::value<double>(&mtbf), "mean seconds between interruptions, for --ckpt-every auto "
                                        "(default: from the failure history in --ckpt-dir)")
      ("keep", po::value<unsigned>(&keep)->default_value(3), "checkpoints to keep")
      ("allow-fresh-start", po::bool_switch(&allow_fresh_start), "when every checkpoint in --ckpt-dir is damaged, "
                                                                 "train from step 0 instead of exiting 79")
      ("ckpt-key", po::value<std::string>(&key_file), "AES-256 key file (mode 0600) encrypting checkpoints "
                                                      "(default: $SAKER_CKPT_KEY; none: unencrypted)")
      ("ckpt-mode", po::value<std::string>(&ckpt_mode), "checkpoint files 0600 (directories 0700), or 0640 (0750) "
                                                        "for the group to read (default: $SAKER_CKPT_MODE, else 0600)")
      ("policy", po::value<std::string>(&policy_file), "site policy (saker-policy.yaml(5)) every checkpoint save "
                                                       "must pass: residency of the lineage, encryption "
                                                       "(default: $SAKER_POLICY; none: no rule)")
      ("device", po::value<std::string>(&device)->default_value(device),
       "where gradients are summed: auto (NCCL on the GPU when built with NCCL and every rank "
       "sees a CUDA device, else saker's host ring), gpu (NCCL or fail), cpu (host ring) "
       "(default: $SAKER_TRAIN_DEVICE, else auto)")
      ("log-every", po::value<std::uint64_t>(&cfg.log_every)->default_value(25), "progress line every N steps")
      ("metrics-file", po::value<std::string>(&cfg.metrics_file)->default_value(env_or("SAKER_METRICS_FILE", ""), ""),
       "append 'step=S loss=.. accuracy=.. eval_loss=.. eval_accuracy=..' lines here at every progress line "
       "(default: $SAKER_METRICS_FILE; none: no file)")
      ("step-sleep-ms", po::value<int>(&cfg.step_sleep_ms)->default_value(0), "sleep after each step (demos, fault tests)")
      ("lineage", po::value<std::string>(&lineage), "datasets trained on, name@version,... "
                                                    "(default: the job's --dataset, $SLURM_SPANK_SAKER_DATASETS)");
  if (!parse_options(args, d)) return kExitOk;
  if (cfg.log_every == 0) cfg.log_every = 1;
  CkptEvery every;
  try {
    every = parse_ckpt_every(ckpt_every);
  } catch (const saker::Error& e) {
    throw po::error(e.what());  // a usage error: exit 2
  }
  cfg.ckpt_every = every.steps;
  if (mtbf != 0 && (!every.automatic || !(mtbf > 0)))
    throw po::error(!every.automatic ? "--mtbf is for --ckpt-every auto" : "--mtbf takes seconds > 0");
  cfg.hidden = MlpShape::parse_hidden(layers);
  cfg.preempt_marker = env_or("SAKER_PREEMPT_MARKER", "");
  cfg.resize_notice = env_or("SAKER_RESIZE_NOTICE", "");
  if (cfg.logical_ranks < 0) throw po::error("--logical-ranks " + std::to_string(cfg.logical_ranks) + " is below 1");

  std::signal(SIGTERM, on_preempt);
  std::signal(SIGUSR1, on_preempt);
  // Ctrl-C (the terminal's SIGINT reaches every rank of saker-run --local, and saker-run
  // forwards its own) is a stop like preemption: emergency checkpoint, exit 75. Before,
  // SIGINT killed the rank and no checkpoint was written, though saker-run announced one.
  std::signal(SIGINT, on_preempt);
  // First heartbeat now, so saker-run's hang detection also watches loading the data and
  // resuming from a checkpoint (a damaged file must not hang a resume forever); the
  // training loop beats every step.
  saker::run::HeartbeatWriter(std::atoi(env_or("SAKER_RANK", "0").c_str())).beat();
  Device wanted;
  try {
    wanted = parse_device(device);
  } catch (const saker::Error& e) {
    throw po::error(e.what());  // a usage error: exit 2
  }
  const Dataset data = read_dataset(data_path);
  ReducerChoice choice = make_reducer(wanted);
  std::unique_ptr<Reducer> reducer = std::move(choice.reducer);
  if (reducer->rank() == 0) {
    std::printf("%s\n", choice.line.c_str());
    std::fflush(stdout);
  }
  std::unique_ptr<SnapshotStore> store;
  if (!ckpt_dir.empty()) {
    CkptStoreOptions so;
    so.dir = ckpt_dir;
    so.keep_last = keep;
    so.lineage = lineage;
    so.key_file = key_file;
    so.mode = ckpt_mode;
    so.allow_fresh_start = allow_fresh_start;
    if (!policy_file.empty()) so.guard = saker::ckpt::PolicyGuard::from_file(policy_file);
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

int main(int argc, char** argv) {
  if (saker::print_version_if_asked(argc, argv, "saker-train")) return 0;
  std::vector<std::string> args(argv + 1, argv + argc);
  const bool make = !args.empty() && args[0] == "make-data";
  if (!args.empty() && (args[0] == "make-data" || args[0] == "train")) args.erase(args.begin());
  try {
    return make ? make_data(args) : run_training(args);
  } catch (const po::error& e) {
    saker::log::error(std::string("saker-train: bad command line: ") + e.what() + "; run saker-train --help");
    return kExitUsage;
  } catch (const saker::ckpt::DestinationRefused& e) {
    saker::log::error(std::string("saker-train: ") + e.what());
    return kExitRefused;
  } catch (const AllDamaged& e) {
    saker::log::error(std::string("saker-train: ") + e.what());
    return kExitAllDamaged;
  } catch (const InputUnusable& e) {
    saker::log::error(std::string("saker-train: ") + e.what());
    return kExitUnusable;
  } catch (const DeviceRefused& e) {
    saker::log::error(std::string("saker-train: ") + e.what());
    return kExitRefused;
  } catch (const saker::Error& e) {
    saker::log::error(std::string("saker-train: ") + e.what());
    return kExitError;
  } catch (const std::exception& e) {
    saker::log::error(std::string("saker-train: unexpected error: ") + e.what());
    return kExitError;
  }
}
