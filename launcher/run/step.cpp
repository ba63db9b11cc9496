#include "launcher/run/step.hpp"

#include <fcntl.h>
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/error.hpp"

#include "common/log.hpp"
#include "common/slurm_compat.hpp"
#include "launcher/run/node_loss.hpp"
#include "launcher/run/supervisor.hpp"

namespace saker::run {
namespace {

bool is_preempted_status(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == kPreemptedExitCode; }
bool is_refused_status(int status) { return WIFEXITED(status) && is_refusal_exit_code(WEXITSTATUS(status)); }

class LocalStep final : public Step {
 public:
  LocalStep(int ranks, std::vector<std::string> program) : ranks_(ranks), program_(std::move(program)) {}

  void start(const Env& env, const sigset_t& child_mask) override {
    pids_.assign(ranks_, -1);
    status_.assign(ranks_, 0);
    failed_rank_ = -1;
    for (int r = 0; r < ranks_; ++r) {
      Env rank_env = env;
      for (auto& [k, v] : local_rank_env(r, ranks_)) rank_env[k] = v;
      pids_[r] = spawn(program_, rank_env, child_mask);
    }
  }

  void forward(int sig) override {
    for (pid_t p : pids_) if (p > 0) ::kill(p, sig);
  }

  void kill_all() override { forward(SIGKILL); }

  bool reap() override {
    bool running = false;
    for (int r = 0; r < ranks_; ++r) {
      if (pids_[r] <= 0) continue;
      int status = 0;
      const pid_t got = ::waitpid(pids_[r], &status, WNOHANG);
      if (got == 0) {
        running = true;
        continue;
      }
      pids_[r] = -1;
      status_[r] = status;
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!ok && !is_preempted_status(status) && failed_rank_ < 0) {
        failed_rank_ = r;
        log::warn("saker-run: rank " + std::to_string(r) + " " + describe_wait_status(status) +
                  "; stopping the other ranks (kill-on-bad-exit)");
        kill_all();
      }
    }
    return !running;
  }

  StepResult result() const override {
    StepResult out;
    out.all_ok = true;
    out.all_preempted = true;
    for (int r = 0; r < ranks_; ++r) {
      const int s = status_[r];
      if (!(WIFEXITED(s) && WEXITSTATUS(s) == 0)) out.all_ok = false;
      if (!is_preempted_status(s)) out.all_preempted = false;
    }
    if (failed_rank_ >= 0) {
      out.detail = "rank " + std::to_string(failed_rank_) + " " + describe_wait_status(status_[failed_rank_]);
      out.refused = is_refused_status(status_[failed_rank_]);
      if (out.refused) out.refused_code = WEXITSTATUS(status_[failed_rank_]);
    } else if (out.all_preempted) {
      out.detail = "all ranks exited with the preempted code " + std::to_string(kPreemptedExitCode);
    } else if (!out.all_ok) {
      for (int r = 0; r < ranks_; ++r) {
        if (!(WIFEXITED(status_[r]) && WEXITSTATUS(status_[r]) == 0)) {
          out.detail = "rank " + std::to_string(r) + " " + describe_wait_status(status_[r]);
          break;
        }
      }
    }
    return out;
  }

 private:
  int ranks_;
  std::vector<std::string> program_;
  std::vector<pid_t> pids_;
  std::vector<int> status_;
  int failed_rank_ = -1;
};

class SrunStep final : public Step {
 public:
  SrunStep(std::vector<std::string> srun_args, std::string self, std::vector<std::string> program)
      : srun_args_(std::move(srun_args)), self_(std::move(self)), program_(std::move(program)),
        command_(srun_command(srun_args_, self_, program_)) {}

  // The placement comes after the user's --srun-arg options: srun takes the last -N/-n.
  void place(std::vector<std::string> placement) override {
    std::vector<std::string> args = srun_args_;
    args.insert(args.end(), placement.begin(), placement.end());
    command_ = srun_command(args, self_, program_);
  }

  ~SrunStep() override { join_relay(); }

  // srun's stderr (its own messages and the ranks' stderr) passes through a relay
  // thread that copies it to ours and notices srun's task-failure lines.
  void start(const Env& env, const sigset_t& child_mask) override {
    join_relay();
    status_ = 0;
    failure_seen_ = false;
    failure_at_ = 0;
    first_failure_ = TaskFailure{};
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      throw Error(explain("cannot create a pipe for srun's stderr", std::strerror(errno), "check ulimit -n"));
    }
    try {
      pid_ = spawn(command_, env, child_mask, fds[1]);
    } catch (...) {
      ::close(fds[0]);
      ::close(fds[1]);
      throw;
    }
    ::close(fds[1]);
    relay_ = std::thread([this, fd = fds[0]] { relay(fd); });
  }
  bool task_failure_seen() const override { return failure_seen_.load(); }
  double task_failure_at() const override { return failure_at_.load(); }
  // srun relays SIGUSR1 and SIGUSR2 to every task of the step, but takes SIGTERM as
  // "cancel the step" (it SIGKILLs the tasks at once: no grace) and SIGINT as "print
  // status". Those two reach the tasks through slurmctld instead, as `scancel -s SIG JOBID`
  // does: every step of the job, never the batch shell, which is this saker-run.
  void forward(int sig) override {
    if (pid_ <= 0) return;
    if (sig == SIGTERM || sig == SIGINT) {
      const char* job = std::getenv("SLURM_JOB_ID");
      const unsigned long id = job != nullptr ? std::strtoul(job, nullptr, 10) : 0;
      if (id != 0 && slurm_compat::kill_job(static_cast<uint32_t>(id), static_cast<uint16_t>(sig), 0) == SLURM_SUCCESS) return;
      log::warn(std::string("saker-run: cannot signal the ranks of job ") + (job != nullptr ? job : "?") +
                " through slurmctld (" + slurm_compat::last_error_text() + "); signalling srun instead");
    }
    ::kill(pid_, sig);
  }
  void kill_all() override { forward(SIGKILL); }

  bool reap() override {
    if (pid_ <= 0) return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == 0) return false;
    pid_ = -1;
    status_ = status;
    join_relay();
    return true;
  }

  StepResult result() const override {
    StepResult out;
    out.all_ok = WIFEXITED(status_) && WEXITSTATUS(status_) == 0;
    out.all_preempted = is_preempted_status(status_);
    // srun's own status (e.g. 143 when it stopped the step) says little; the first task
    // it reported failed says which rank, where and how.
    out.detail = first_failure_.detail.empty() ? "srun " + describe_wait_status(status_) : first_failure_.detail;
    if (first_failure_.exit_code >= 0) {
      out.refused = is_refusal_exit_code(first_failure_.exit_code);
      out.refused_code = first_failure_.exit_code;
    } else if (first_failure_.detail.empty()) {
      out.refused = is_refused_status(status_);
      out.refused_code = WIFEXITED(status_) ? WEXITSTATUS(status_) : 0;
    }
    return out;
  }

 private:
  // Copies everything to our stderr at once (never holds a partial line back) and
  // checks each complete line. Ends at EOF: srun and everything it started are gone.
  void relay(int fd) {
    std::string line;
    char buf[8192];
    while (true) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      for (ssize_t done = 0; done < n;) {
        const ssize_t w = ::write(STDERR_FILENO, buf + done, static_cast<size_t>(n - done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += w;
      }
      for (ssize_t i = 0; i < n; ++i) {
        if (buf[i] != '\n') {
          if (line.size() < 4096) line.push_back(buf[i]);
          continue;
        }
        if (!failure_seen_.load() && is_srun_task_failure_line(line)) {
          failure_at_ = wall_clock();
          failure_seen_ = true;
        }
        if (first_failure_.detail.empty()) first_failure_ = parse_srun_task_failure(line);
        line.clear();
      }
    }
    ::close(fd);
  }
  void join_relay() {
    if (relay_.joinable()) relay_.join();
  }

  std::vector<std::string> srun_args_;
  std::string self_;
  std::vector<std::string> program_;
  std::vector<std::string> command_;
  pid_t pid_ = -1;
  int status_ = 0;
  std::thread relay_;
  std::atomic<bool> failure_seen_{false};
  std::atomic<double> failure_at_{0};
  TaskFailure first_failure_;  // written by the relay thread, read after it is joined
};

}  // namespace

std::vector<std::string> srun_command(const std::vector<std::string>& srun_args, const std::string& self,
                                      const std::vector<std::string>& program) {
  std::vector<std::string> cmd = {"srun", "--mpi=pmi2", "--kill-on-bad-exit=1"};
  cmd.insert(cmd.end(), srun_args.begin(), srun_args.end());
  cmd.push_back(self);
  cmd.push_back("--exec-rank");
  cmd.push_back("--");
  cmd.insert(cmd.end(), program.begin(), program.end());
  return cmd;
}

std::unique_ptr<Step> make_local_step(int ranks, std::vector<std::string> program) {
  return std::make_unique<LocalStep>(ranks, std::move(program));
}

std::unique_ptr<Step> make_srun_step(std::vector<std::string> srun_args, std::string self,
                                     std::vector<std::string> program) {
  return std::make_unique<SrunStep>(std::move(srun_args), std::move(self), std::move(program));
}

}  // namespace saker::run
