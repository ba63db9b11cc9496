#include "launcher/run/node_loss.hpp"

#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <csignal>
#include <cstring>
#include <regex>

#include "common/hostlist.hpp"
#include "common/log.hpp"
#include "common/slurm_compat.hpp"
#include "launcher/run/process.hpp"

namespace saker::run {
namespace {

void say(const std::string& line) { log::info("saker-run: " + line); }

std::string slurm_error_text() { return slurm_compat::last_error_text(); }

uint32_t job_number(const std::string& job_id) { return static_cast<uint32_t>(std::strtoul(job_id.c_str(), nullptr, 10)); }

}  // namespace

bool is_srun_task_failure_line(const std::string& line) {
  // srun's own words (22.05 and earlier): "srun: error: NODE: task 0: Exited with exit
  // code 1", "srun: error: NODE: tasks 0-3: Killed", "... Terminated", "srun: error: Node
  // failure on NODE".
  static const std::regex failure(R"(^srun: error: (\S+: tasks? [0-9,-]+: (Exited|Killed|Terminated|Segmentation)|Node failure on ))");
  return std::regex_search(line, failure);
}

TaskFailure parse_srun_task_failure(const std::string& line) {
  static const std::regex task_line(R"(^srun: error: (\S+): tasks? ([0-9,-]+): (.*)$)");
  std::smatch m;
  TaskFailure out;
  if (!std::regex_search(line, m, task_line)) return out;
  const std::string node = m[1], tasks = m[2], what = m[3];
  const std::string who = (tasks.find_first_of(",-") == std::string::npos ? "task " : "tasks ") + tasks +
                          " (rank " + tasks + ") on " + node;
  static const std::regex exited(R"(^Exited with exit code ([0-9]+))");
  std::smatch e;
  if (std::regex_search(what, e, exited)) {
    out.exit_code = std::stoi(e[1]);
    out.detail = who + " exited with code " + std::string(e[1]);
    return out;
  }
  // srun prints strsignal()'s text ("Killed", "Terminated", "Segmentation fault").
  for (int sig = 1; sig < NSIG; ++sig) {
    const char* text = strsignal(sig);
    const char* abbrev = sigabbrev_np(sig);
    if (text == nullptr || abbrev == nullptr) continue;
    if (what.rfind(text, 0) == 0) {
      out.detail = who + " killed by SIG" + abbrev;
      return out;
    }
  }
  out.detail = who + ": " + what;
  return out;
}

std::string surviving_nodes(const std::string& nodelist, const std::vector<std::string>& lost) {
  std::vector<std::string> kept;
  for (const std::string& n : hostlist::expand(nodelist)) {
    if (std::find(lost.begin(), lost.end(), n) == lost.end()) kept.push_back(n);
  }
  return kept.empty() ? std::string() : hostlist::compress(kept);
}

bool evacuate_and_requeue(const std::string& job_id, const std::string& nodelist,
                          const std::vector<std::string>& lost, unsigned wanted_nodes) {
  const uint32_t id = job_number(job_id);
  const std::string lost_list = hostlist::compress(lost);
  const std::string kept = surviving_nodes(nodelist, lost);
  const uint32_t node_count =
      wanted_nodes > 0 ? wanted_nodes : static_cast<uint32_t>(hostlist::expand(nodelist).size());

  // 1. Shrink. Without it the requeued job stays COMPLETING on the lost node until
  //    slurmctld declares that node DOWN, which is exactly the wait we avoid.
  if (!kept.empty()) {
    job_desc_msg_t shrink;
    slurm_init_job_desc_msg(&shrink);
    slurm_compat::job_id_field(shrink) = id;
    shrink.req_nodes = const_cast<char*>(kept.c_str());
    if (slurm_update_job(&shrink) != SLURM_SUCCESS) {
      log::warn("saker-run: cannot release " + lost_list + " from job " + job_id + " (" + slurm_error_text() +
                "); requeueing anyway: the job restarts once slurmctld declares " + lost_list + " down");
    } else {
      say("released lost node(s) " + lost_list + " from job " + job_id + " (job now on " + kept + ")");
    }
  }
  // 2. Requeue.
  if (slurm_compat::requeue(id, 0) != SLURM_SUCCESS) {
    log::error("saker-run: cannot requeue job " + job_id + " (" + slurm_error_text() +
               "); submit it with --requeue and check JobRequeue in slurm.conf");
    return false;
  }
  say("requeued job " + job_id + ": it restarts from the latest checkpoint on " + std::to_string(node_count) +
      " healthy node(s), excluding " + lost_list);
  // 3. Exclude the lost nodes and restore the node count, from a helper process: the
  //    update is accepted only after this batch script has exited (see the header).
  std::fflush(nullptr);
  const pid_t helper = ::fork();
  if (helper == 0) {
    job_desc_msg_t pending;
    slurm_init_job_desc_msg(&pending);
    slurm_compat::job_id_field(pending) = id;
    pending.exc_nodes = const_cast<char*>(lost_list.c_str());
    pending.min_nodes = node_count;
    pending.max_nodes = node_count;
    if (slurm_update_job(&pending) != SLURM_SUCCESS) {
      log::warn("saker-run: could not exclude " + lost_list + " from requeued job " + job_id + " (" +
                slurm_error_text() + "); if it lands there again, its launch fails and slurmctld requeues it");
    }
    std::_Exit(0);
  }
  if (helper < 0) {
    log::warn("saker-run: cannot fork the helper that excludes " + lost_list + " from the requeued job");
    return true;
  }
  // Give the helper time to hand its request to slurmctld (milliseconds), not to finish.
  for (int i = 0; i < 10; ++i) {
    int status = 0;
    if (::waitpid(helper, &status, WNOHANG) == helper) break;
    ::usleep(30 * 1000);
  }
  return true;
}

}  // namespace saker::run
