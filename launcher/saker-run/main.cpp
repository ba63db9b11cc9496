// saker-run: launches a training program's ranks (srun inside Slurm, or N local
// processes), exports rank variables, forwards preemption signals, requeues and
// restarts. All logic lives in launcher/run/; this is the command-line shell, on the
// front end every Saker tool shares (common/cli.hpp: errors, --help, exit codes of saker(7)).
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>

#include "common/cli.hpp"
#include "common/error.hpp"
#include "launcher/run/launcher.hpp"
#include "launcher/run/options.hpp"

namespace {

using namespace saker::run;

int run(const saker::cli::Command&, const saker::cli::Args& args) {
  const RunOptions options = run_options(args);
  try {
    if (options.exec_rank) exec_rank(options);
    // srun tasks re-enter this very binary, wherever it is installed.
    return run_supervised(options, std::filesystem::read_symlink("/proc/self/exe").string());
  } catch (const saker::Error& e) {
    throw saker::cli::Failure(options.exec_rank ? kExitExec : kExitLaunch, std::string("saker-run: ") + e.what());
  } catch (const std::exception& e) {
    throw saker::cli::Failure(kExitLaunch, std::string("saker-run: unexpected error: ") + e.what());
  }
}

}  // namespace

int main(int argc, char** argv) { return saker::cli::main(run_tool(), argc, argv, run, std::cout, std::cerr); }
