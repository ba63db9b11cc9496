// saker-sweep's command line end to end, without Slurm (run_cli, the same front end the
// program calls): exit codes from saker(7), and messages that name the thing, the reason
// and the fix.
#include <catch2/catch.hpp>

#include <sstream>

#include "sweep/cli.hpp"

using namespace saker::sweep;

namespace {

struct Result {
  int rc;
  std::string out, err;
};

Result cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int rc = run_cli(args, out, err);
  return {rc, out.str(), err.str()};
}

}  // namespace

TEST_CASE("saker-sweep --help prints the usage and exits 0; no arguments is a usage error", "[sweep][cli]") {
  const Result help = cli({"--help"});
  CHECK(help.rc == 0);
  CHECK(help.out.find("saker-sweep run SWEEP") != std::string::npos);
  CHECK(cli({}).rc == 2);
}
