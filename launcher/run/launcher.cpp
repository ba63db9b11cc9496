#include "launcher/run/launcher.hpp"

#include <signal.h>
#include <slurm/slurm.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "common/error.hpp"
#include "common/hostlist.hpp"
#include "common/log.hpp"
#include "common/reserved_port.hpp"
#include "common/shm_names.hpp"
#include "common/slurm_compat.hpp"
#include "launcher/run/heartbeat.hpp"
#include "launcher/run/launch_support.hpp"
#include "launcher/run/node_loss.hpp"
#include "launcher/run/node_probe.hpp"
#include "launcher/run/process.hpp"
#include "launcher/run/rank_env.hpp"
#include "launcher/run/runtime_dir.hpp"
#include "launcher/run/step.hpp"
#include "launcher/run/supervise.hpp"
#include "launcher/run/supervisor.hpp"

namespace saker::run {
namespace {

void say(const std::string& line) { log::info("saker-run: " + line); }

// Slurm's pseudo step ids (batch script, extern, interactive) are >= this; a real step
// (srun) has a smaller SLURM_STEP_ID.
constexpr unsigned long kFirstPseudoStepId = 0xfffffff0UL;

// The id scontrol requeues exactly this job by. One task of every job array has a job id
// equal to the array's id, and `scontrol requeue ARRAY_ID` requeues every task of the
// array; ARRAY_ID_TASK names the task alone.
std::string requeue_target(const std::string& job_id) {
  const std::string array = env_or("SLURM_ARRAY_JOB_ID", ""), task = env_or("SLURM_ARRAY_TASK_ID", "");
  return !array.empty() && !task.empty() ? array + "_" + task : job_id;
}

}  // namespace

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

// MASTER_PORT serves torch's own TCPStore, which Saker cannot authenticate. Holding the
// port (ReservedPort) keeps the kernel from handing it out, but another user's listener
// with SO_REUSEADDR may still bind it (Linux checks no owner there), and a fixed
// --master-port can be taken before saker-run starts. A port that accepts connections
// before the ranks start is such a listener: refuse the attempt rather than let the ranks
// talk to it (saker-run(1), MASTER_PORT).
void refuse_taken_master_port(const std::string& address, int port) {
  if (!tcp_reachable(address, port, 500)) return;
  throw Error(explain("MASTER_PORT " + std::to_string(port) + " on " + address +
                          " accepts connections before the ranks have started",
                      "another program listens there, perhaps another user's; torch.distributed's ranks would "
                      "reach it instead of rank 0's store",
                      "leave out --master-port (saker-run then holds a fresh port for each attempt) or pick a "
                      "free one; see MASTER_PORT in saker-run(1)"));
}

bool requeue_job(const std::string& job_id) {
  const std::string cmd = "scontrol requeue " + requeue_target(job_id);
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    log::error("saker-run: `" + cmd + "` failed (" + describe_wait_status(rc) +
               "); the job is not requeued: submit it with --requeue and check JobRequeue in slurm.conf");
    return false;
  }
  return true;
}

// Inside `srun ... saker-run`, saker-run's own srun would wait forever for resources the
// enclosing step holds ("step creation temporarily disabled"). Say so instead.
void refuse_inside_step() {
  const char* step = std::getenv("SLURM_STEP_ID");
  if (step == nullptr || *step == '\0') return;
  char* end = nullptr;
  const unsigned long id = std::strtoul(step, &end, 10);
  if (*end != '\0' || id >= kFirstPseudoStepId) return;
  throw Error(explain("saker-run is running inside job step " + env_or("SLURM_JOB_ID", "?") + "." + step +
                          " (started by srun)",
                      "saker-run starts the step itself with srun; a nested srun would wait for the CPUs "
                      "the enclosing step holds",
                      "run saker-run once from the batch script or salloc shell, not under srun "
                      "(sbatch -N2 --wrap 'saker-run -- PROG'), or use saker-run --local -n N inside the step"));
}

// Whether argv[0] can be executed here (PATH search as execvp does): a missing program
// fails every attempt the same way, so it is refused before the first one.
std::string why_not_executable(const std::string& program) {
  if (program.find('/') != std::string::npos) {
    struct stat st {};
    if (::stat(program.c_str(), &st) != 0) return errno == ENOENT ? "it does not exist" : std::strerror(errno);
    if (S_ISDIR(st.st_mode)) return "it is a directory";
    if (!S_ISREG(st.st_mode)) return "it is not a regular file";
    if (::access(program.c_str(), X_OK) != 0) return "it is not executable (no x permission for this user)";
    return "";
  }
  const std::string path = env_or("PATH", "/usr/bin:/bin");
  std::size_t pos = 0;
  while (pos <= path.size()) {
    std::size_t colon = path.find(':', pos);
    if (colon == std::string::npos) colon = path.size();
    const std::string dir = colon > pos ? path.substr(pos, colon - pos) : ".";
    const std::string candidate = dir + "/" + program;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0) return "";
    pos = colon + 1;
  }
  return "no executable file of that name in PATH (" + path + ")";
}

// After a failed attempt inside Slurm: if a node of the job is lost, a restart would fail
// at once, so wait for slurmctld to requeue the job (it signals us) or for the node to
// come back. Returns true when every node answers again.
bool wait_out_lost_nodes(SignalWatcher& signals, const std::string& nodelist, double limit_s) {
  std::vector<std::string> lost = unreachable_nodes(nodelist, 1000);
  if (lost.empty()) return true;
  std::string names;
  for (const auto& n : lost) names += (names.empty() ? "" : ",") + n;
  say("node(s) " + names + " lost (slurmd does not accept connections): not spending a restart on them; "
      "waiting for Slurm to requeue the job onto healthy nodes");
  const double until = wall_clock() + limit_s;
  while (wall_clock() < until) {
    const int sig = signals.wait(2000);
    if (sig != 0 && sig != SIGCHLD) {
      say(std::string("received SIG") + sigabbrev_np(sig) + " while node(s) " + names +
          " are lost: Slurm is ending this run of the job (node failure); it resumes from the checkpoint if requeued");
      return false;
    }
    if (unreachable_nodes(nodelist, 1000).empty()) {
      say("node(s) " + names + " answer again");
      return true;
    }
  }
  say("node(s) " + names + " still lost after " + std::to_string(static_cast<int>(limit_s)) + " s");
  return false;
}

std::string first_node_address(const std::string& nodelist) {
  const std::vector<std::string> hosts = hostlist::expand(nodelist);
  if (hosts.empty()) throw Error(explain("SLURM_JOB_NODELIST is empty", "the job has no nodes", "run inside sbatch/salloc"));
  node_info_msg_t* info = nullptr;
  std::string addr = hosts.front();
  if (slurm_load_node_single(&info, const_cast<char*>(hosts.front().c_str()), SHOW_ALL) == SLURM_SUCCESS &&
      info != nullptr && info->record_count > 0 && info->node_array[0].node_addr != nullptr) {
    addr = info->node_array[0].node_addr;
  }
  if (info != nullptr) slurm_free_node_info_msg(info);
  return addr;
}

void exec_rank(const RunOptions& options) {
  Env env = rank_env_from_slurm(current_environment());
  exec_with_env(options.program, env);
}

int run_supervised(const RunOptions& options, const std::string& self) {
  return Supervisor(options, self).run();
}

}  // namespace saker::run
