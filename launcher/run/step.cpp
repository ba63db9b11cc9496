#include "launcher/run/step.hpp"

#include <signal.h>
#include <sys/wait.h>

#include "common/log.hpp"
#include "launcher/run/supervisor.hpp"

namespace saker::run {
namespace {

bool is_preempted_status(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == kPreemptedExitCode; }
bool is_refused_status(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == kRefusedExitCode; }

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
      : command_(srun_command(srun_args, self, program)) {}

  void start(const Env& env, const sigset_t& child_mask) override {
    status_ = 0;
    pid_ = spawn(command_, env, child_mask);
  }
  // srun relays SIGTERM, SIGUSR1 and SIGUSR2 to every task of the step.
  void forward(int sig) override { if (pid_ > 0) ::kill(pid_, sig); }
  void kill_all() override { forward(SIGKILL); }

  bool reap() override {
    if (pid_ <= 0) return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == 0) return false;
    pid_ = -1;
    status_ = status;
    return true;
  }

  StepResult result() const override {
    StepResult out;
    out.all_ok = WIFEXITED(status_) && WEXITSTATUS(status_) == 0;
    out.all_preempted = is_preempted_status(status_);
    out.detail = "srun " + describe_wait_status(status_);
    // srun exits with the highest task exit code; ranks refuse together (same settings), so
    // 78 arrives unless a rank was killed first (then the step is restarted once more).
    out.refused = is_refused_status(status_);
    return out;
  }

 private:
  std::vector<std::string> command_;
  pid_t pid_ = -1;
  int status_ = 0;
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
