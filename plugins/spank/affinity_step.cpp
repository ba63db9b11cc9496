#include "plugins/spank/affinity_step.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <vector>

extern "C" {
#include <slurm/slurm.h>
}

#include "common/error.hpp"
#include "common/file.hpp"
#include "common/hash.hpp"
#include "common/hostlist.hpp"
#include "common/log.hpp"
#include "plugins/affinity/binding.hpp"
#include "plugins/affinity/gres_check.hpp"
#include "plugins/affinity/plan_table.hpp"
#include "plugins/affinity/planner.hpp"
#include "plugins/affinity/topology.hpp"

namespace saker::spank {
namespace {

namespace aff = saker::affinity;

struct StepState {
  std::optional<AffinityMode> option;  // --gpu-affinity, when the user gave it
  std::optional<aff::OmpBind> omp_bind;  // --omp-bind, when the user gave it
  std::optional<aff::Machine> machine;
  std::string load_error;              // why machine is empty, if it was needed
  // The step's GPUs as slurmstepd sees them before the tasks fork. A task's own copy
  // may show only its GPU (--gpus-per-task binds per task), but the plan needs them all.
  std::string step_gpus, visible;
  std::string node;  // this node's Slurm name
};
StepState g_step;

// An option's value, parsed into its slot; a bad one is reported (on the user's terminal
// in sbatch/srun/salloc) and the non-zero return aborts the command.
template <typename T, typename Parse>
int take_option(std::optional<T>& slot, const char* optarg, const char* name, Parse parse) {
  try {
    slot = parse(optarg == nullptr ? "" : optarg, name);
    return 0;
  } catch (const std::exception& e) {
    slurm_error("saker: %s", e.what());
    return -1;
  }
}

int on_gpu_affinity_option(int /*val*/, const char* optarg, int /*remote*/) {
  return take_option(g_step.option, optarg, "--gpu-affinity", parse_affinity_mode);
}

struct spank_option g_gpu_affinity_option = {
    const_cast<char*>("gpu-affinity"), const_cast<char*>("auto|none|explain"),
    const_cast<char*>("Bind each task to its own GPU, the cores and NUMA node near it and the nearest NIC, "
                      "from the node's topology (auto, the default); leave tasks alone (none); or bind and "
                      "print the plan on stderr (explain) (Saker)."),
    1, 0, on_gpu_affinity_option};

int on_omp_bind_option(int /*val*/, const char* optarg, int /*remote*/) {
  return take_option(g_step.omp_bind, optarg, "--omp-bind", aff::parse_omp_bind);
}

struct spank_option g_omp_bind_option = {
    const_cast<char*>("omp-bind"), const_cast<char*>("none|close|spread"),
    const_cast<char*>("Pin OpenMP threads inside each task: none (the default) sets only OMP_NUM_THREADS; close or "
                      "spread also set OMP_PLACES (one per core) and OMP_PROC_BIND. Binding pins the task's first "
                      "thread to one core, and threads and processes it starts later (PyTorch's DataLoader "
                      "workers, communication threads) inherit it. A value the task already has wins (Saker)."),
    1, 0, on_omp_bind_option};

AffinityMode mode(const Config& config) { return g_step.option.value_or(config.affinity); }
aff::OmpBind omp_bind(const Config& config) { return g_step.omp_bind.value_or(config.omp_bind); }

// Batch scripts, the extern step and salloc's interactive shell are not ranks.
bool is_rank_step(spank_t sp) {
  uint32_t step = 0;
  if (spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS) return false;
  return step != SLURM_BATCH_SCRIPT && step != SLURM_EXTERN_CONT && step != SLURM_INTERACTIVE_STEP;
}

// slurmstepd carries Slurm's parsed configuration; read it when it is exported, and do
// without it otherwise (the plugin must load in any daemon).
const slurm_conf_t* daemon_conf() { return static_cast<const slurm_conf_t*>(::dlsym(RTLD_DEFAULT, "slurm_conf")); }

// The path of a file Slurm keeps beside slurm.conf (gres.conf, cgroup.conf), found as Slurm
// finds it: slurm_get_extra_conf_path() follows SLURM_CONF, the built-in default and a
// configless node's cached copies. slurm_conf.slurm_conf alone is not enough: slurmstepd of
// 24.11 and 26.05 receives its configuration from slurmd and leaves that path unset.
std::string extra_conf_path(const char* name) {
  using ExtraConfPath = char* (*)(const char*);
  using XFree = void (*)(void**);
  auto find = reinterpret_cast<ExtraConfPath>(::dlsym(RTLD_DEFAULT, "slurm_get_extra_conf_path"));
  auto release = reinterpret_cast<XFree>(::dlsym(RTLD_DEFAULT, "slurm_xfree"));
  if (find != nullptr && release != nullptr) {
    char* found = find(name);  // Slurm's allocator: freed by its xfree
    if (found != nullptr) {
      std::string path = found;
      release(reinterpret_cast<void**>(&found));
      return path;
    }
  }
  const slurm_conf_t* conf = daemon_conf();
  if (conf == nullptr || conf->slurm_conf == nullptr) return {};
  const std::string conf_path = conf->slurm_conf;
  return conf_path.substr(0, conf_path.rfind('/') + 1) + name;
}

std::string getenv_of(spank_t sp, const char* name) {
  char buf[4096];
  if (spank_getenv(sp, name, buf, sizeof buf) != ESPANK_SUCCESS) return {};
  return buf;
}

std::string short_hostname() {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  std::string name(host);
  return name.substr(0, name.find('.'));
}

// This node's Slurm name (not always the host name: several slurmd per host, or
// NodeHostname= aliases): the step's node list at this node's relative id.
std::string node_name(spank_t sp) {
  if (auto name = getenv_of(sp, "SLURMD_NODENAME"); !name.empty()) return name;
  uint32_t id = 0;
  std::string list = getenv_of(sp, "SLURM_STEP_NODELIST");
  if (list.empty()) list = getenv_of(sp, "SLURM_JOB_NODELIST");
  if (!list.empty() && spank_get_item(sp, S_JOB_NODEID, &id) == ESPANK_SUCCESS) {
    try {
      const auto nodes = saker::hostlist::expand(list);
      if (id < nodes.size()) return nodes[id];
    } catch (const std::exception&) {
      // fall through to the host name
    }
  }
  return short_hostname();
}

// The compact topology cache lives in slurmd's spool (root-owned, per node).
std::string default_cache_path(const std::string& node) {
  const slurm_conf_t* conf = daemon_conf();
  if (conf == nullptr || conf->slurmd_spooldir == nullptr) return {};
  std::string dir = conf->slurmd_spooldir;
  const std::pair<const char*, std::string> tokens[] = {{"%n", node}, {"%h", short_hostname()}};
  for (const auto& [token, value] : tokens)
    for (auto pos = dir.find(token); pos != std::string::npos; pos = dir.find(token)) dir.replace(pos, 2, value);
  if (::access(dir.c_str(), W_OK) != 0) return {};
  return dir + "/saker-topology.bin";
}

// ConstrainDevices=yes renumbers CUDA_VISIBLE_DEVICES from 0 inside the step.
aff::Renumbering renumbering() {
  const std::string path = extra_conf_path("cgroup.conf");
  if (path.empty()) return aff::Renumbering::detect;
  const auto text = saker::file::read(path);
  if (!text) return aff::Renumbering::detect;
  std::string squeezed;  // line by line, without blanks, lower case
  for (std::size_t i = 0; i <= text->size(); ++i) {
    const char c = i < text->size() ? (*text)[i] : '\n';
    if (c == '\n') {
      if (squeezed.rfind("constraindevices=yes", 0) == 0) return aff::Renumbering::yes;
      squeezed.clear();
    } else if (c != ' ' && c != '\t') {
      squeezed += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  return aff::Renumbering::detect;
}

// The note of what slurmd's log was told, if this daemon wrote it: a regular file of root's
// (slurmstepd's user) at `path`, not a link. Anything else is not believed.
std::string own_note(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return {};
  struct stat st {};
  char buf[128];
  ssize_t n = -1;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid()) n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

// Whether this node's slurmd log has had `lines` at warning level within the last day:
// a note beside the topology cache (slurmd's spool, root's) holds when and their digest.
// Without a writable spool nothing is noted, so every step says them.
bool said_today(const std::string& node, const std::string& lines) {
  const std::string cache = default_cache_path(node);
  if (cache.empty()) return false;
  const std::string path = cache.substr(0, cache.rfind('/') + 1) + "saker-gres-said";
  const std::string digest = saker::hash::xxh3_128(lines.data(), lines.size()).hex();
  const long long now = static_cast<long long>(::time(nullptr));
  const std::string note = own_note(path);
  const auto space = note.find(' ');
  if (space != std::string::npos && note.compare(space + 1, std::string::npos, digest) == 0) {
    const long long then = std::strtoll(note.c_str(), nullptr, 10);
    if (then <= now && now - then < 24 * 3600) return true;
  }
  std::string why;
  const int fd = saker::file::open_private(path, O_TRUNC, 0600, &why);
  if (fd < 0) {
    log::debug("cannot note in " + path + " that gres.conf's disagreements were said: " + why);
    return false;  // said again at the next step: better than silence
  }
  const std::string record = std::to_string(now) + " " + digest;
  if (::write(fd, record.data(), record.size()) != static_cast<ssize_t>(record.size()))
    log::debug("cannot note in " + path + " that gres.conf's disagreements were said: " + std::strerror(errno));
  ::close(fd);
  return false;  // this step says them
}

// Slurm numbers and binds GPUs by gres.conf, Saker by the topology: when they disagree
// every rank is shifted, so slurmd's log says so, from slurmstepd before the tasks start
// (root: it may note what it said). At warning level the first time a node sees these
// disagreements, again when they change and once a day while they last; at debug level
// in the steps between, so a node whose gres.conf is wrong (a test cluster's fake GPUs)
// does not write the same lines for every step of every job.
void log_gres_disagreements(const std::string& node, const aff::Machine& machine) {
  const std::string path = extra_conf_path("gres.conf");
  if (path.empty()) return;
  const auto text = saker::file::read(path);
  if (!text) return;
  std::vector<std::string> lines;
  std::string all;
  for (const auto& problem : aff::check_gres_conf(machine, *text, node)) {
    lines.push_back("gres.conf disagrees with the topology: " + problem + " (check with `saker-topo check-gres " + path + "`)");
    all += lines.back() + "\n";
  }
  if (lines.empty()) return;
  const bool said = said_today(node, all);
  for (const auto& line : lines) {
    if (said) log::debug(line + " (said at warning level earlier today)");
    else log::warn(line);
  }
}

aff::Machine load_machine(const Config& config, const std::string& node) {
  return aff::load_cached(aff::TopologySource{config.topology_path, default_cache_path(node)});
}

// Availability fails safe: without `strict` the task runs as Slurm launched it.
int fall_back(const Config& config, const std::string& why) {
  const std::string line = "gpu-affinity: " + why + (config.strict ? "" : "; the task runs unbound");
  std::fprintf(stderr, "saker: %s%s\n", config.strict ? "error: " : "warning: ", line.c_str());
  std::fflush(stderr);
  if (config.strict) {
    log::error(line);
    return -1;
  }
  log::warn(line);
  return 0;
}

}  // namespace

int affinity_register_option(spank_t sp) {
  if (spank_option_register(sp, &g_gpu_affinity_option) != ESPANK_SUCCESS) {
    slurm_error("saker: could not register the --gpu-affinity option");
    return -1;
  }
  if (spank_option_register(sp, &g_omp_bind_option) != ESPANK_SUCCESS) {
    slurm_error("saker: could not register the --omp-bind option");
    return -1;
  }
  return 0;
}

int affinity_prepare_step(spank_t sp, const Config& config) {
  if (mode(config) == AffinityMode::none || !is_rank_step(sp)) return 0;
  g_step.step_gpus = getenv_of(sp, "SLURM_STEP_GPUS");
  g_step.visible = getenv_of(sp, "CUDA_VISIBLE_DEVICES");
  try {
    g_step.node = node_name(sp);
    g_step.machine = load_machine(config, g_step.node);
  } catch (const std::exception& e) {
    g_step.load_error = std::string("cannot load the node topology: ") + e.what();
    log::warn(g_step.load_error);
  }
  if (g_step.machine) log_gres_disagreements(g_step.node, *g_step.machine);
  return 0;
}

int affinity_task_init(spank_t sp, const Config& config) {
  if (mode(config) == AffinityMode::none || !is_rank_step(sp)) return 0;
  if (!g_step.machine) return fall_back(config, g_step.load_error);
  const aff::Machine& machine = *g_step.machine;
  int task = 0;
  uint32_t local_tasks = 0;
  if (spank_get_item(sp, S_TASK_ID, &task) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &local_tasks) != ESPANK_SUCCESS)
    return fall_back(config, "Slurm did not tell the local task id and count");
  aff::Request request;
  aff::Plan plan;
  try {
    request.gpus = aff::step_gpus_from_env(g_step.step_gpus.c_str(), g_step.visible.c_str(), renumbering());
    // The step's CPUs: slurmstepd's own affinity (task/affinity binds only the tasks).
    request.allowed = aff::cpu_affinity(::getppid());
    request.local_tasks = local_tasks;
    request.omp_bind = omp_bind(config);
    plan = aff::make_plan(machine, request);
  } catch (const std::exception& e) {
    return fall_back(config, e.what());
  }
  const aff::RankPlan& mine = plan.ranks.at(static_cast<std::size_t>(task));
  // 64 KiB: an OMP_PLACES (or the plan's record of it) of a few hundred cores fits. One
  // buffer for every lookup, left uninitialised: zeroing 64 KiB per variable was most of
  // the task's own start-up cost (issue 30).
  constexpr int kEnvMax = 64 * 1024;
  const std::unique_ptr<char[]> buf(new char[kEnvMax]);
  const aff::TaskEnv env = aff::task_env(mine, [&](const std::string& key) -> std::optional<std::string> {
    const spank_err_t rc = spank_getenv(sp, key.c_str(), buf.get(), kEnvMax);
    if (rc == ESPANK_SUCCESS) return std::string(buf.get());
    if (rc == ESPANK_NOSPACE) return std::string("(a value longer than 64 KiB)");  // set: still the user's
    return std::nullopt;
  });
  for (const auto& [key, value] : env.set)
    if (spank_setenv(sp, key.c_str(), value.c_str(), 1) != ESPANK_SUCCESS)
      return fall_back(config, "cannot set " + key + " in the task's environment");
  for (const auto& key : env.unset)
    if (spank_unsetenv(sp, key.c_str()) != ESPANK_SUCCESS)
      return fall_back(config, "cannot unset " + key + " (left by an enclosing step's plan) in the task's environment");
  try {
    aff::bind_cpus(mine.pus);
    aff::bind_memory(machine.numas[mine.numa].os_index);
  } catch (const std::exception& e) {
    return fall_back(config, e.what());
  }
  if (mode(config) == AffinityMode::explain) {
    std::string text = task == 0 ? aff::format_plan_table(machine, request, plan) : std::string();
    text += "saker: rank " + std::to_string(task) + " bound to CPUs " + aff::format_index_list(mine.pus) +
            ", NUMA node " + std::to_string(machine.numas[mine.numa].os_index) +
            (mine.gpu ? ", GPU " + std::to_string(*mine.gpu) : std::string());
    for (const auto& [key, value] : env.kept) text += ", keeps its own " + key + "=" + value;
    text += "\n";
    std::fputs(text.c_str(), stderr);
    std::fflush(stderr);
  }
  return 0;
}

}  // namespace saker::spank
