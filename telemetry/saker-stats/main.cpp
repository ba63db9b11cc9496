// saker-stats: what a finished (or running) job did with what it held, per step and
// node, from the records spank_saker.so's telemetry writes (saker-telemetry(5)):
// CPU and GPU efficiency, memory high-water marks, energy, throttling, the share of
// time in allreduce, plain verdicts, a sparkline, --json and an --svg plot.
//
// Exit codes (saker(7)): 0 shown, 2 bad usage, 3 no readable record for the job.
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/error.hpp"
#include "common/cli.hpp"
#include "telemetry/proc.hpp"
#include "telemetry/record.hpp"
#include "telemetry/report.hpp"

namespace cli = saker::cli;
namespace tel = saker::telemetry;

namespace {

constexpr const char* kDefaultDir = "/var/lib/saker/telemetry";

const cli::Tool& tool() {
  static const cli::Tool t{
      "saker-stats",
      "what a job did with what it held, from spank_saker.so's telemetry",
      {{"",
        "[--dir DIR] [--json] [--svg FILE] [--no-plot] JOBID",
        "Shows the telemetry spank_saker.so recorded for job JOBID (plugstack.conf: telemetry=DIR):\n"
        "  per step and node, CPU efficiency (CPU time over wall time times allocated CPUs), memory\n"
        "  high-water mark, I/O, per GPU utilisation, idle share, memory, energy, throttling, ECC and XID\n"
        "  errors, per rank the share of time in allreduce; then plain verdicts, and utilisation over\n"
        "  time as a sparkline.",
        {{"dir", "DIR",
          "the records' directory (default: $SAKER_STATS_DIR, else telemetry= of spank_saker.so in Slurm's "
          "plugstack.conf, else /var/lib/saker/telemetry)"},
         {"json", "", "one JSON object instead of the table"},
         {"svg", "FILE", "also write a plot of utilisation over time as SVG"},
         {"no-plot", "", "leave the sparklines out of the table"}},
        1, 1, "JOBID"}},
      "Exit codes (saker(7)): 0 shown, 2 bad usage, 3 no readable record for the job.\n"};
  return t;
}

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

int show(const cli::Args& a) {
  const std::string job = a.positional[0];
  std::string dir;
  if (a.has("dir")) dir = a.get("dir");
  else if (const char* d = std::getenv("SAKER_STATS_DIR"); d && *d) dir = d;
  else if (dir = dir_from_plugstack(); dir.empty()) dir = kDefaultDir;

  std::string path;
  try {
    path = tel::record_path(dir, job);
  } catch (const saker::Error& e) {  // not a Slurm job id form: names the forms
    throw cli::UsageError(std::string("saker-stats: ") + e.what());
  }
  std::ifstream in(path);
  if (!in) {
    const int err = errno;
    std::cerr << cli::kErrorPrefix
              << saker::explain("saker-stats: cannot read " + path, std::strerror(err),
                                err == ENOENT ? "the job has no step that ended on a node with telemetry on yet, or its "
                                                "records are in another directory (--dir; telemetry= in plugstack.conf)"
                                              : "records are readable by root, the telemetry group and the job's owner: "
                                                "run it as one of them")
              << "\n";
    return cli::kUnusable;
  }
  std::stringstream text;
  text << in.rdbuf();
  tel::ParseResult parsed = tel::parse_records(text.str());
  for (const auto& p : parsed.problems) std::cerr << cli::kErrorPrefix << "saker-stats: " << path << ": " << p << "\n";
  const auto records = tel::latest_per_step_and_node(std::move(parsed.records));
  if (records.empty()) {
    std::cerr << cli::kErrorPrefix << "saker-stats: " << path << " holds no complete record" << (parsed.problems.empty() ? "" : " (see above)") << "\n";
    return cli::kUnusable;
  }
  if (a.has("svg")) {
    const std::string svg = a.get("svg");
    std::ofstream out(svg);
    out << tel::svg_plot("job " + job + ": utilisation over time (%)", records);
    if (!out.flush()) {
      std::cerr << cli::kErrorPrefix << "saker-stats: cannot write " << svg << ": " << std::strerror(errno) << "\n";
      return cli::kUnusable;
    }
  }
  if (a.has("json")) {
    std::cout << tel::to_json(job, records, parsed.problems);
    return cli::kOk;
  }
  const auto& first = records.front().info;
  std::cout << "job " << job << " (user " << first.user << ", account " << (first.account.empty() ? "-" : first.account)
            << "): " << records.size() << " step/node record(s) from " << path << "\n\n";
  std::string t = tel::table(records);
  if (a.has("no-plot")) t = t.substr(0, t.find("\nutilisation over time"));
  std::cout << t;
  const auto v = tel::verdicts(records);
  std::cout << "\nverdicts:\n";
  if (v.empty()) std::cout << "  nothing stands out: the step used what it held\n";
  for (const auto& line : v) std::cout << "  - " << line << "\n";
  return cli::kOk;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::main(tool(), argc, argv, [](const cli::Command&, const cli::Args& a) { return show(a); }, std::cout,
                   std::cerr);
}
