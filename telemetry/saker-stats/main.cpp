// saker-stats: what a finished (or running) job did with what it held, per step and
// node, from the records spank_saker.so's telemetry writes (saker-telemetry(5)):
// CPU and GPU efficiency, memory high-water marks, energy, throttling, the share of
// time in allreduce, plain verdicts, a sparkline, --json and an --svg plot.
//
// Exit codes (saker(7)): 0 shown, 2 bad usage, 3 no readable record for the job.
#include <boost/program_options.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/error.hpp"
#include "common/version.hpp"
#include "telemetry/proc.hpp"
#include "telemetry/record.hpp"
#include "telemetry/report.hpp"

namespace po = boost::program_options;
namespace tel = saker::telemetry;

namespace {

constexpr int kOk = 0, kUsage = 2, kNoRecord = 3;
constexpr const char* kDefaultDir = "/var/lib/saker/telemetry";

const char* kUsageText =
    "Usage: saker-stats [--dir DIR] [--json] [--svg FILE] [--no-plot] JOBID\n"
    "\n"
    "Shows the telemetry spank_saker.so recorded for job JOBID (plugstack.conf: telemetry=DIR):\n"
    "per step and node, CPU efficiency (CPU time over wall time times allocated CPUs), memory\n"
    "high-water mark, I/O, per GPU utilisation, idle share, memory, energy, throttling, ECC and XID\n"
    "errors, per rank the share of time in allreduce; then plain verdicts, and utilisation over\n"
    "time as a sparkline.\n"
    "\n"
    "  --dir DIR    the records' directory (default: $SAKER_STATS_DIR, else telemetry= of\n"
    "               spank_saker.so in Slurm's plugstack.conf, else /var/lib/saker/telemetry)\n"
    "  --json       one JSON object instead of the table\n"
    "  --svg FILE   also write a plot of utilisation over time as SVG\n"
    "  --no-plot    leave the sparklines out of the table\n"
    "\n"
    "Exit codes: 0 shown, 2 bad usage, 3 no readable record for the job.\n";

// telemetry=DIR from the spank_saker.so line of Slurm's plugstack.conf, if readable.
std::string dir_from_plugstack() {
  const char* conf = std::getenv("SLURM_CONF");
  std::string slurm_conf = conf && *conf ? conf : "/etc/slurm/slurm.conf";
  std::string plugstack = slurm_conf.substr(0, slurm_conf.rfind('/') + 1) + "plugstack.conf";
  if (auto text = tel::read_small_file(slurm_conf)) {
    std::istringstream in(*text);
    for (std::string line; std::getline(in, line);)
      if (line.rfind("PlugStackConfig=", 0) == 0) plugstack = line.substr(16);
  }
  auto text = tel::read_small_file(plugstack);
  if (!text) return {};
  std::istringstream in(*text);
  for (std::string line; std::getline(in, line);) {
    if (line.find("spank_saker.so") == std::string::npos || line.find_first_not_of(" \t") == line.find('#')) continue;
    std::istringstream words(line);
    for (std::string w; words >> w;)
      if (w.rfind("telemetry=", 0) == 0) return w.substr(10);
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  if (saker::print_version_if_asked(argc, argv, "saker-stats")) return kOk;
  po::options_description opts("options");
  opts.add_options()("help,h", "")("dir", po::value<std::string>(), "")("json", "")("svg", po::value<std::string>(), "")(
      "no-plot", "")("job", po::value<std::string>(), "");
  po::positional_options_description pos;
  pos.add("job", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(opts).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    std::cerr << "saker-stats: " << e.what() << "\n" << kUsageText;
    return kUsage;
  }
  if (vm.count("help")) {
    std::cout << kUsageText;
    return kOk;
  }
  if (!vm.count("job")) {
    std::cerr << "saker-stats: which job? give its id (squeue or sacct shows it)\n" << kUsageText;
    return kUsage;
  }
  const std::string job = vm["job"].as<std::string>();
  std::string dir;
  if (vm.count("dir")) dir = vm["dir"].as<std::string>();
  else if (const char* d = std::getenv("SAKER_STATS_DIR"); d && *d) dir = d;
  else if (dir = dir_from_plugstack(); dir.empty()) dir = kDefaultDir;

  std::string path;
  try {
    path = tel::record_path(dir, job);
  } catch (const saker::Error& e) {
    std::cerr << "saker-stats: " << e.what() << "\n";
    return kUsage;
  }
  std::ifstream in(path);
  if (!in) {
    const int err = errno;
    std::cerr << "saker-stats: cannot read " << path << ": " << std::strerror(err) << "; "
              << (err == ENOENT ? "the job has no step that ended on a node with telemetry on yet, or its records are in another "
                                  "directory (--dir; telemetry= in plugstack.conf)"
                                : "records are readable by root, the telemetry-group and the job's owner")
              << "\n";
    return kNoRecord;
  }
  std::stringstream text;
  text << in.rdbuf();
  tel::ParseResult parsed = tel::parse_records(text.str());
  for (const auto& p : parsed.problems) std::cerr << "saker-stats: " << path << ": " << p << "\n";
  const auto records = tel::latest_per_step_and_node(std::move(parsed.records));
  if (records.empty()) {
    std::cerr << "saker-stats: " << path << " holds no complete record" << (parsed.problems.empty() ? "" : " (see above)") << "\n";
    return kNoRecord;
  }
  if (vm.count("svg")) {
    const std::string svg = vm["svg"].as<std::string>();
    std::ofstream out(svg);
    out << tel::svg_plot("job " + job + ": utilisation over time (%)", records);
    if (!out.flush()) {
      std::cerr << "saker-stats: cannot write " << svg << ": " << std::strerror(errno) << "\n";
      return kNoRecord;
    }
  }
  if (vm.count("json")) {
    std::cout << tel::to_json(job, records, parsed.problems);
    return kOk;
  }
  const auto& first = records.front().info;
  std::cout << "job " << job << " (user " << first.user << ", account " << (first.account.empty() ? "-" : first.account)
            << "): " << records.size() << " step/node record(s) from " << path << "\n\n";
  std::string t = tel::table(records);
  if (vm.count("no-plot")) t = t.substr(0, t.find("\nutilisation over time"));
  std::cout << t;
  const auto v = tel::verdicts(records);
  std::cout << "\nverdicts:\n";
  if (v.empty()) std::cout << "  nothing stands out: the step used what it held\n";
  for (const auto& line : v) std::cout << "  - " << line << "\n";
  return kOk;
}
