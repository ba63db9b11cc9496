// saker-run: launches a training program's ranks (srun inside Slurm, or N local
// processes), exports rank variables, forwards preemption signals, requeues and
// restarts. All logic lives in launcher/run/; this is the command-line shell.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "common/error.hpp"
#include "common/version.hpp"
#include "common/log.hpp"
#include "launcher/run/launcher.hpp"
#include "launcher/run/options.hpp"

int main(int argc, char** argv) {
  if (saker::print_version_if_asked(argc, argv, "saker-run")) return 0;
  using namespace saker::run;
  RunOptions options;
  std::string help;
  try {
    options = parse_run_options(argc, argv, &help);
  } catch (const saker::Error& e) {
    saker::log::error(std::string("saker-run: ") + e.what());
    return kExitUsage;
  }
  if (options.help) {
    std::printf("%s\nExit codes (shared by every Saker tool, see saker(7)): 0 success, 1 step failed after\n"
                "all restarts, 2 usage error, 3 launch/requeue error (or inside a job step), or a rank's\n"
                "input is not usable (it exited 3), 75 preempted or interrupted (requeued, or stopped with\n"
                "--local), 78 a rank refused its settings, 79 every checkpoint is damaged, 127 PROGRAM cannot\n"
                "be executed. Final codes (a rank exiting 2, 3, 78, 79, 126, 127) are never restarted.\n"
                "See saker-run(1).\n",
                help.c_str());
    return kExitOk;
  }
  try {
    if (options.exec_rank) exec_rank(options);
    // srun tasks re-enter this very binary, wherever it is installed.
    return run_supervised(options, std::filesystem::read_symlink("/proc/self/exe").string());
  } catch (const saker::Error& e) {
    saker::log::error(std::string("saker-run: ") + e.what());
    return options.exec_rank ? kExitExec : kExitLaunch;
  } catch (const std::exception& e) {
    saker::log::error(std::string("saker-run: unexpected error: ") + e.what());
    return kExitLaunch;
  }
}
