#include "plugins/spank/telemetry_hook.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/log.hpp"
#include "plugins/spank/node_record.hpp"
#include "telemetry/counters_dir.hpp"

namespace saker::spank {
namespace {

// Upper bound on how long the last task's exit waits for the record (the sampler
// normally needs 1-3 ms); past it the step ends and the sampler finishes on its own.
constexpr int kStopWaitMs = 250;

struct Sampler {
  pid_t pid = -1;
  int pidfd = -1;    // signals reach this very process, never a later one with its pid
  int done_fd = -1;  // read end of a pipe the sampler holds open until it exits
  std::string counters_dir;
  std::string step_name;
  std::uint32_t local_tasks = 0;
  std::uint32_t exited = 0;
};
Sampler g_sampler;

std::string getenv_of(spank_t sp, const char* name) {
  char buf[1024];
  if (spank_getenv(sp, name, buf, sizeof buf) != ESPANK_SUCCESS) return {};
  return buf;
}

// "0,1,3": digits and commas only, or "" (a GPU list becomes a sampler argument).
std::string gpu_list(std::string s) {
  for (char c : s)
    if ((c < '0' || c > '9') && c != ',') return {};
  return s;
}

std::string user_name(uid_t uid) {
  std::vector<char> buf(16384);
  passwd pw{}, *out = nullptr;
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &out) == 0 && out != nullptr) return pw.pw_name;
  return std::to_string(uid);
}

gid_t group_id(const std::string& name) {
  if (name.empty()) return 0;
  std::vector<char> buf(16384);
  group gr{}, *out = nullptr;
  if (::getgrnam_r(name.c_str(), &gr, buf.data(), buf.size(), &out) == 0 && out != nullptr) return gr.gr_gid;
  log::warn("telemetry: group '" + name + "' (telemetry-group=) is unknown on this node; records stay root's");
  return 0;
}

std::string step_name(std::uint32_t step) {
  if (step == SLURM_BATCH_SCRIPT) return "batch";
  if (step == SLURM_INTERACTIVE_STEP) return "interactive";
  return std::to_string(step);
}

double now_epoch() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Forks twice: the sampler is re-parented to init (or the node's subreaper) at once, so
// slurmstepd's waitpid(-1) never meets it. Only async-signal-safe calls after fork().
pid_t spawn(const std::vector<std::string>& args, int* done_fd) {
  std::vector<char*> argv;
  for (const auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  char path_env[] = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
  char* envp[] = {path_env, nullptr};
  int done[2], pidpipe[2];
  if (::pipe2(done, O_CLOEXEC) != 0) return -1;
  if (::pipe2(pidpipe, O_CLOEXEC) != 0) {
    ::close(done[0]);
    ::close(done[1]);
    return -1;
  }
  const pid_t child = ::fork();
  if (child == 0) {
    const pid_t grandchild = ::fork();
    if (grandchild == 0) {
      ::setsid();
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      const int devnull = ::open("/dev/null", O_RDWR);
      if (devnull >= 0) ::dup2(devnull, 0);
      ::dup2(done[1], 3);  // dup2 clears close-on-exec: the sampler holds it until it exits
      ::syscall(SYS_close_range, 4u, ~0u, 0u);
      ::execve(argv[0], argv.data(), envp);
      ::_exit(127);
    }
    const pid_t sent = grandchild;
    (void)!::write(pidpipe[1], &sent, sizeof sent);
    ::_exit(grandchild > 0 ? 0 : 1);
  }
  ::close(done[1]);
  ::close(pidpipe[1]);
  pid_t sampler = -1;
  if (child > 0) {
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    if (::read(pidpipe[0], &sampler, sizeof sampler) != static_cast<ssize_t>(sizeof sampler)) sampler = -1;
  }
  ::close(pidpipe[0]);
  if (sampler <= 0) {
    ::close(done[0]);
    return -1;
  }
  *done_fd = done[0];
  return sampler;
}

// true when the sampler has exited (its end of the pipe closed) within `ms`.
bool wait_done(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    const int n = ::poll(&p, 1, static_cast<int>(std::max<long long>(0, left)));
    if (n > 0) {
      char c;
      if (::read(fd, &c, 1) == 0) return true;  // EOF
      continue;
    }
    if (n == 0 || (n < 0 && errno != EINTR)) return false;
  }
}


void stop_sampler(bool wait) {
  if (g_sampler.pid <= 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  if (wait_done(g_sampler.done_fd, 0)) {
    log::warn("telemetry: step " + g_sampler.step_name + ": the sampler exited before the step ended, so this node " +
              "has no record for it (check telemetry= and telemetry-sampler= in plugstack.conf)");
    telemetry::remove_counters_dir(g_sampler.counters_dir);
    wait = false;
  }
  // The signal carries the largest resident size of the tasks slurmstepd has reaped
  // (KiB): a task that peaked and exited between two samples is still counted.
  rusage ru{};
  ::getrusage(RUSAGE_CHILDREN, &ru);
  siginfo_t info{};
  info.si_signo = SIGTERM;
  info.si_code = SI_QUEUE;
  info.si_pid = ::getpid();
  info.si_uid = ::getuid();
  info.si_value.sival_ptr = reinterpret_cast<void*>(static_cast<std::uintptr_t>(ru.ru_maxrss));
  // Through the pidfd: if the sampler already exited, its pid may belong to another
  // process by now. Without pidfds (Linux < 5.3), only while its pipe is open.
  if (g_sampler.pidfd >= 0) ::syscall(SYS_pidfd_send_signal, g_sampler.pidfd, SIGTERM, &info, 0u);
  else if (!wait_done(g_sampler.done_fd, 0)) ::sigqueue(g_sampler.pid, SIGTERM, info.si_value);
  if (wait) {
    const bool done = wait_done(g_sampler.done_fd, kStopWaitMs);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    char line[256];
    std::snprintf(line, sizeof line, "telemetry: step %s: %s after %.1f ms", g_sampler.step_name.c_str(),
                  done ? "record written, step end delayed" : "sampler still writing, step end not delayed further",
                  ms);
    if (done) log::info(line);
    else log::warn(line);
  }
  ::close(g_sampler.done_fd);
  if (g_sampler.pidfd >= 0) ::close(g_sampler.pidfd);
  g_sampler.pidfd = -1;
  g_sampler.pid = -1;
  g_sampler.done_fd = -1;
}

}  // namespace

int telemetry_start(spank_t sp, const Config& config) {
  if (config.telemetry.dir.empty()) return 0;
  std::uint32_t job = 0, step = 0, local_tasks = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS || spank_get_item(sp, S_JOB_STEPID, &step) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS || spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS)
    return 0;
  if (step == SLURM_EXTERN_CONT) return 0;  // no tasks of the user's to measure
  spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &local_tasks);
  std::uint16_t ncpus = 0;
  spank_get_item(sp, S_JOB_NCPUS, &ncpus);
  std::uint64_t mem_mb = 0;
  spank_get_item(sp, S_STEP_ALLOC_MEM, &mem_mb);

  // slurmstepd's own environment names the node (slurmd sets it, per node even when
  // several slurmd share a host); the job's environment is the user's.
  const char* own_node = std::getenv("SLURMD_NODENAME");
  std::string node = own_node ? own_node : "";
  if (node.empty()) {
    char host[256] = {0};
    ::gethostname(host, sizeof host - 1);
    node = std::string(host).substr(0, std::string(host).find('.'));
  }
  // User and account from the prolog's record when there is one (the user cannot forge
  // it); the job's environment otherwise. They only label figures.
  std::string user, account;
  try {
    if (auto rec = read_step_node_record(node_record_path(config.state_dir, node, job))) {
      user = rec->user;
      account = rec->account;
    }
  } catch (const std::exception&) {
  }
  if (user.empty()) user = user_name(uid);
  if (account.empty()) account = getenv_of(sp, "SLURM_JOB_ACCOUNT");
  std::string gpus = gpu_list(getenv_of(sp, "SLURM_STEP_GPUS"));
  if (gpus.empty()) gpus = gpu_list(getenv_of(sp, "SLURM_JOB_GPUS"));

  // The ranks' counters directory: private to the job's user, on tmpfs.
  char tmpl[] = "/dev/shm/saker-telemetry-XXXXXX";
  std::string counters;
  if (::mkdtemp(tmpl) != nullptr) {
    if (::chown(tmpl, uid, gid) == 0) counters = tmpl;
    else ::rmdir(tmpl);
  }

  g_sampler = Sampler{};
  g_sampler.step_name = std::to_string(job) + "." + step_name(step);
  g_sampler.local_tasks = local_tasks;
  g_sampler.counters_dir = counters;
  char interval[32];
  std::snprintf(interval, sizeof interval, "%g", config.telemetry.interval);
  char start[32];
  std::snprintf(start, sizeof start, "%.3f", now_epoch());
  std::vector<std::string> args = {config.telemetry.sampler, "--job", std::to_string(job), "--step", step_name(step),
                                   "--node", node, "--user", user, "--uid", std::to_string(uid), "--account", account,
                                   "--tasks", std::to_string(local_tasks), "--cpus", std::to_string(ncpus ? ncpus : 1),
                                   "--interval", interval, "--stepd", std::to_string(::getpid()),
                                   "--record-dir", config.telemetry.dir, "--start", start,
                                   "--operators-gid", std::to_string(group_id(config.telemetry.group))};
  if (!gpus.empty()) args.insert(args.end(), {"--gpus", gpus});
  if (!counters.empty()) args.insert(args.end(), {"--counters-dir", counters});
  if (mem_mb) args.insert(args.end(), {"--mem-limit", std::to_string(mem_mb << 20)});
  if (!config.telemetry.prometheus_dir.empty()) args.insert(args.end(), {"--prometheus-dir", config.telemetry.prometheus_dir});
  if (!config.telemetry.nvml.empty()) args.insert(args.end(), {"--nvml", config.telemetry.nvml});
  g_sampler.pid = spawn(args, &g_sampler.done_fd);
  if (g_sampler.pid > 0) g_sampler.pidfd = static_cast<int>(::syscall(SYS_pidfd_open, g_sampler.pid, 0u));
  if (g_sampler.pid <= 0) {
    log::warn("telemetry: cannot start " + config.telemetry.sampler + " for step " + g_sampler.step_name + ": " +
              std::strerror(errno) + "; the step runs without telemetry (check telemetry-sampler= in plugstack.conf)");
    if (!counters.empty()) ::rmdir(counters.c_str());
    g_sampler.counters_dir.clear();
  }
  return 0;
}

int telemetry_task_init(spank_t sp) {
  if (g_sampler.counters_dir.empty()) return 0;
  spank_setenv(sp, "SAKER_TELEMETRY_DIR", g_sampler.counters_dir.c_str(), 1);
  return 0;
}

int telemetry_task_exit(spank_t /*sp*/) {
  if (g_sampler.pid <= 0) return 0;
  if (++g_sampler.exited >= g_sampler.local_tasks) stop_sampler(true);
  return 0;
}

int telemetry_exit(spank_t /*sp*/) {
  if (spank_context() == S_CTX_REMOTE) stop_sampler(false);
  return 0;
}

}  // namespace saker::spank
