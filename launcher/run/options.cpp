#include "launcher/run/options.hpp"

#include <boost/program_options.hpp>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "common/cli.hpp"
#include "common/error.hpp"
#include "launcher/run/rank_env.hpp"

namespace po = boost::program_options;

namespace saker::run {
namespace {

// Index of the program's name (or of the "--" before it) in argv: the first argument that
// is neither an option nor the value of one. Options that take a value and are written
// without "=" ("-n 2", "--ckpt-dir D") consume the next argument.
int program_start(int argc, const char* const* argv, const po::options_description& options) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--" || a.size() < 2 || a[0] != '-') return i;
    if (a.find('=') != std::string::npos) continue;
    const bool is_long = a.compare(0, 2, "--") == 0;
    if (!is_long && a.size() > 2) continue;  // "-n2"
    const po::option_description* d = options.find_nothrow(is_long ? a.substr(2) : a, false, false, false);
    if (d != nullptr && d->semantic()->max_tokens() > 0) ++i;
  }
  return argc;
}

}  // namespace

RunOptions parse_run_options(int argc, const char* const* argv, std::string* help_text) {
  RunOptions o;
  po::options_description visible(
      "Usage: saker-run [OPTIONS] [--] PROGRAM [ARGS...]\n"
      "       saker-run --local -n N [OPTIONS] [--] PROGRAM [ARGS...]\n\n"
      "Launches PROGRAM as the ranks of a training job (srun inside Slurm, N local\n"
      "processes with --local), exports the rank variables Saker and torch.distributed\n"
      "read, forwards preemption signals, requeues, and restarts failed steps.\n"
      "Like srun and torchrun, option parsing stops at PROGRAM: everything after it is\n"
      "PROGRAM's, so `saker-run --local -n 2 train --epochs 3` works; `--` is optional.\n\nOptions");
  bool no_requeue = false;
  std::string hang_timeout = "auto", nodes, on_node_loss = "shrink";
  visible.add_options()
      ("help,h", "print this help and exit")
      ("local", po::bool_switch(&o.local), "run the ranks on this machine, without Slurm")
      ("ntasks,n", po::value<int>(&o.ntasks)->default_value(1), "number of ranks with --local")
      ("max-restarts", po::value<int>(&o.max_restarts)->default_value(3),
       "restarts of a failed step before giving up (from the latest checkpoint with --ckpt-dir)")
      ("ckpt-dir", po::value<std::string>(&o.ckpt_dir), "checkpoint directory, exported as SAKER_CKPT_DIR")
      ("own-checkpoints", po::bool_switch(&o.own_checkpoints),
       "PROGRAM keeps checkpoints of its own (e.g. a script's own --ckpt-dir) and resumes from them: "
       "restart messages say so (default: $SAKER_RUN_OWN_CHECKPOINTS=1; without it or --ckpt-dir "
       "saker-run does not know whether a restart resumes)")
      ("grace", po::value<double>(&o.grace_s)->default_value(60),
       "seconds between SIGTERM (or a forwarded preemption signal) and SIGKILL, for the ranks' "
       "emergency checkpoint (preemption, --timeout, --hang-timeout)")
      ("timeout", po::value<double>(&o.timeout_s)->default_value(0),
       "wall-clock seconds one attempt may run; then SIGTERM, --grace, SIGKILL, counted as failed (0: no limit)")
      ("hang-timeout", po::value<std::string>(&hang_timeout)->default_value("auto"),
       "seconds a rank's heartbeat file ($SAKER_HEARTBEAT_DIR/rank-N, touched by the rank, e.g. by "
       "saker-train every step) may stay unchanged before the rank counts as hung: the attempt is "
       "stopped like --timeout and counted as failed. auto: 10 times the slowest step interval seen, at "
       "least 60 s (600 s until the ranks have beaten 3 times); 0: off; ranks that never touch it are not watched")
      ("nodes", po::value<std::string>(&nodes),
       "MIN:MAX (or N): the nodes an elastic run may go on with, as torchrun's --nnodes. A lost node then "
       "shrinks the run onto the survivors of the allocation while MIN remain, and it grows back up to MAX "
       "when nodes return (default: the allocation's size, so a lost node requeues the job)")
      ("on-node-loss", po::value<std::string>(&on_node_loss)->default_value("shrink"),
       "shrink (go on at once on the surviving nodes, within --nodes; requeue below MIN), requeue (move the "
       "job off the lost node), or wait (for the node to answer again)")
      ("resize-wait", po::value<double>(&o.resize_wait_s)->default_value(120),
       "seconds the ranks have to stop at their next checkpoint boundary when the run grows "
       "($SAKER_RESIZE_NOTICE); then SIGTERM (their emergency checkpoint)")
      ("master-port", po::value<int>(&o.master_port)->default_value(0),
       "MASTER_PORT for the ranks (default: a free port, new for each attempt, held by saker-run until the "
       "attempt ends so that no other program is given it; rank 0 binds it with SO_REUSEADDR)")
      ("transit", po::value<std::string>(&o.transit),
       "how the ranks' links protect their bytes, exported as SAKER_COMM_TRANSIT: auth (the default: every "
       "connection proves this attempt's key, SAKER_JOB_KEY), encrypt (also AES-256-GCM between nodes), or "
       "off (no authentication: benchmarks only). Default: SAKER_COMM_TRANSIT from the environment, else auth")
      ("srun-arg", po::value<std::vector<std::string>>(&o.srun_args)->composing(),
       "extra argument for srun (repeatable), e.g. --srun-arg=--cpu-bind=cores")
      ("no-requeue", po::bool_switch(&no_requeue), "on preemption stop instead of running scontrol requeue")
      ("dry-run", po::bool_switch(&o.dry_run), "print the launch command and MASTER_ADDR; run nothing");
  po::options_description hidden;
  hidden.add_options()
      ("exec-rank", po::bool_switch(&o.exec_rank), "internal: set this task's rank variables and exec")
      ("program", po::value<std::vector<std::string>>(&o.program), "program and arguments");
  po::options_description all;
  all.add(visible).add(hidden);
  po::positional_options_description positional;
  positional.add("program", -1);

  // Everything from the program name on (or after the first "--") is the program's,
  // never saker-run's options, as with srun and torchrun.
  const int split = program_start(argc, argv, all);
  po::variables_map vm;
  // No guessing: Boost took "--max-restart 2" for --max-restarts and then said its value
  // was missing. An unknown option is named with the one probably meant (saker(7)).
  const int style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
  try {
    po::store(po::command_line_parser(split, argv).options(all).positional(positional).style(style).run(), vm);
    po::notify(vm);
  } catch (const po::unknown_option& e) {
    std::vector<std::string> names;
    for (const auto& d : visible.options()) names.push_back(d->long_name());
    const std::string typed = e.get_option_name();
    const std::string bare = typed.substr(typed.find_first_not_of('-'));
    const std::string guess = cli::closest(bare.substr(0, bare.find('=')), names);
    throw Error(explain("unknown option " + typed +
                            (guess.empty() ? ""
                                           : (guess.rfind(bare, 0) == 0 ? " (options are never abbreviated)" : "") +
                                                 std::string("; did you mean --") + guess + "?"),
                        "", "see saker-run --help"));
  } catch (const po::error& e) {
    throw Error(explain("bad command line", e.what(), "see saker-run --help"));
  }
  for (int i = split < argc && std::strcmp(argv[split], "--") == 0 ? split + 1 : split; i < argc; ++i) {
    o.program.emplace_back(argv[i]);
  }
  o.help = vm.count("help") > 0;
  o.requeue = !no_requeue;
  o.on_node_loss = parse_node_loss(on_node_loss);
  if (vm.count("nodes") > 0) o.nodes = parse_node_range(nodes);
  if (hang_timeout == "auto") {
    o.hang_timeout_s = kHangAuto;
  } else {
    char* end = nullptr;
    o.hang_timeout_s = std::strtod(hang_timeout.c_str(), &end);
    if (hang_timeout.empty() || *end != '\0' || o.hang_timeout_s < 0) {
      throw Error(explain("--hang-timeout " + hang_timeout, "it is neither auto nor a number of seconds (0 or more)",
                          "pass --hang-timeout auto, a number of seconds, or 0 to turn hang detection off"));
    }
  }
  if (const char* own = std::getenv(kOwnCheckpointsEnv)) {
    const std::string v = own;
    if (v == "1" || v == "yes" || v == "true") o.own_checkpoints = true;
  }
  if (help_text != nullptr) {
    std::ostringstream s;
    s << visible;
    *help_text = s.str();
  }
  if (o.help) return o;
  if (o.program.empty()) {
    throw Error(explain("no program to run", "nothing follows the options", "write saker-run [OPTIONS] -- PROGRAM ARGS"));
  }
  if (o.ntasks < 1) throw Error(explain("--ntasks " + std::to_string(o.ntasks), "it must be at least 1", "pass -n 1 or more"));
  if (o.nodes.given() && o.local) {
    throw Error(explain("--nodes with --local", "a local run has one node", "leave out --nodes, or run inside sbatch/salloc"));
  }
  if (o.ntasks > 1 && !o.local) {
    throw Error(explain("-n is only for --local", "inside Slurm the allocation decides the ranks",
                        "use sbatch --ntasks/--nodes, or add --local"));
  }
  if (o.max_restarts < 0) throw Error(explain("--max-restarts is negative", "it counts restarts", "pass 0 or more"));
  if (o.grace_s < 0 || o.timeout_s < 0 || o.resize_wait_s < 0) {
    throw Error(explain("--grace/--timeout/--resize-wait is negative", "they are durations", "pass 0 or more seconds"));
  }
  transit_env(o.transit, "");  // refuses a --transit value that is not auth, encrypt or off
  if (o.master_port < 0 || o.master_port > 65535) throw Error(explain("--master-port is out of range", "TCP ports are 1-65535", "pass a free port"));
  return o;
}

}  // namespace saker::run
