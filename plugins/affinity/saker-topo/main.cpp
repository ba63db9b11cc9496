// saker-topo: shows a node's topology as Saker's affinity planner sees it, prints
// the per-rank plan spank_saker.so would apply (same library, same table), and
// checks Slurm's gres.conf against the topology.
//
//   saker-topo show [--topology FILE.xml]
//   saker-topo plan [--topology FILE.xml] --ntasks-per-node N [--gpus LIST] [--cpuset LIST]
//                   [--shared-gpus] [--omp-bind none|close|spread] [--format table|env]
//   saker-topo check-gres GRES.CONF [--topology FILE.xml] [--node NAME]
//
// Exit codes (saker(7)): 0 success, 1 the plan is impossible or gres.conf disagrees (the
// reasons are printed), 2 bad usage, 3 the topology or gres.conf cannot be read.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "common/error.hpp"
#include "plugins/affinity/gres_check.hpp"
#include "plugins/affinity/plan_table.hpp"
#include "plugins/affinity/planner.hpp"
#include "plugins/affinity/topology.hpp"

namespace cli = saker::cli;
namespace aff = saker::affinity;

namespace {

const cli::Tool& tool() {
  static const cli::Option kTopology{"topology", "FILE.xml", "hwloc XML file (default: discover this machine)"};
  static const cli::Tool t{
      "saker-topo",
      "a node's topology as Saker's affinity planner sees it, its per-rank plan, and gres.conf checked against it",
      {{"show", "[--topology FILE.xml]",
        "the NUMA nodes (cores, CPUs), the GPUs (PCI address, vendor, NUMA node, numbering) and the NICs with "
        "their PCI distance (hops) to every GPU and NUMA node",
        {kTopology}, 0, 0, ""},
       {"plan",
        "--ntasks-per-node N [--topology FILE.xml] [--gpus LIST] [--cpuset LIST] [--shared-gpus] "
        "[--omp-bind none|close|spread] [--format table|env]",
        "for each local rank: the GPU, CPUs, NUMA node, NICs and the environment spank_saker.so would apply",
        {kTopology,
         {"ntasks-per-node", "N", "local tasks (1 or more)"},
         {"gpus", "LIST", "the step's GPU indexes (SLURM_STEP_GPUS), e.g. 0-3"},
         {"cpuset", "LIST", "allowed CPUs, e.g. 0-15 (default: the topology's allowed CPUs)"},
         {"shared-gpus", "", "let ranks share GPUs when there are more ranks than GPUs"},
         {"omp-bind", "none|close|spread", "as the job option: whether OMP_PLACES/OMP_PROC_BIND are set (default none)"},
         {"format", "table|env", "a table (default), or one KEY=VALUE line per rank"}},
        0, 0, ""},
       {"check-gres", "GRES.CONF [--topology FILE.xml] [--node NAME]",
        "compare gres.conf's GPU lines (File=, Cores=, Links=) with the topology; print every disagreement",
        {kTopology, {"node", "NAME", "this node's name, for gres.conf NodeName= lines"}}, 1, 1, "GRES.CONF file"}},
      "Exit codes (saker(7)): 0 success, 1 impossible plan or gres.conf disagrees (reasons printed),\n"
      "2 bad usage, 3 the topology or gres.conf cannot be read.\n"};
  return t;
}

aff::Machine load(const std::string& path) { return path.empty() ? aff::load_live() : aff::load_xml_file(path); }

int check_gres(const aff::Machine& machine, const std::string& file, const std::string& node) {
  // An ifstream opens a directory and reads nothing from it: an empty gres.conf that "agrees".
  if (std::error_code ec; std::filesystem::is_directory(file, ec)) {
    throw cli::Failure(cli::kUnusable, saker::explain("saker-topo check-gres: " + file + " is a directory", "",
                                                      "name the node's gres.conf in it, e.g. " + file + "/gres.conf"));
  }
  std::ifstream in(file);
  if (!in) {
    throw cli::Failure(cli::kUnusable, saker::explain("saker-topo check-gres: cannot read " + file, std::strerror(errno),
                                                      "name the node's gres.conf, e.g. /etc/slurm/gres.conf"));
  }
  std::ostringstream text;
  text << in.rdbuf();
  const auto problems = aff::check_gres_conf(machine, text.str(), node);
  for (const auto& p : problems) std::cout << p << "\n";
  if (problems.empty()) std::cout << "gres.conf agrees with the topology (" << machine.gpus.size() << " GPU(s))\n";
  return problems.empty() ? cli::kOk : cli::kFailed;
}

int plan(const aff::Machine& machine, const std::string& gpus, const std::string& cpuset, unsigned ntasks, bool shared,
         aff::OmpBind omp_bind, const std::string& format) {
  aff::Request request;
  request.gpus = aff::step_gpus_from_list(gpus);
  if (!cpuset.empty()) {
    request.allowed = aff::parse_index_list(cpuset, "--cpuset");
  } else if (machine.allowed_pus != machine.all_pus()) {
    request.allowed = machine.allowed_pus;  // the topology was exported inside a cgroup or cpuset
  }
  request.local_tasks = ntasks;
  request.sharing = shared ? aff::GpuSharing::shared : aff::GpuSharing::exclusive;
  request.omp_bind = omp_bind;
  const aff::Plan plan = aff::make_plan(machine, request);
  std::cout << (format == "env" ? aff::format_plan_env(plan, machine) : aff::format_plan_table(machine, request, plan));
  return cli::kOk;
}

int run(const cli::Command& c, const cli::Args& a) {
  const std::string format = a.get("format", "table");
  unsigned ntasks = 0;
  aff::OmpBind bind = aff::OmpBind::none;
  if (c.name == "plan") {
    if (!a.has("ntasks-per-node"))
      throw cli::UsageError(saker::explain("saker-topo plan: --ntasks-per-node is missing", "the plan is per local rank",
                                           "pass --ntasks-per-node N"));
    ntasks = static_cast<unsigned>(a.number("ntasks-per-node", 0, 1, 4096));
    if (format != "table" && format != "env")
      throw cli::UsageError(saker::explain("saker-topo plan: --format is '" + format + "'", "it is table or env",
                                           "pass --format table or --format env"));
    try {
      bind = aff::parse_omp_bind(a.get("omp-bind", "none"), "saker-topo plan --omp-bind");
    } catch (const saker::Error& e) {
      throw cli::UsageError(e.what());
    }
  }
  aff::Machine machine;
  try {
    machine = load(a.get("topology"));
  } catch (const std::exception& e) {
    throw cli::Failure(cli::kUnusable, std::string("saker-topo: ") + e.what());
  }
  if (c.name == "show") {
    std::cout << aff::format_machine(machine);
    return cli::kOk;
  }
  if (c.name == "check-gres") return check_gres(machine, a.positional[0], a.get("node"));
  return plan(machine, a.get("gpus"), a.get("cpuset"), ntasks, a.has("shared-gpus"), bind, format);
}

}  // namespace

int main(int argc, char** argv) { return cli::main(tool(), argc, argv, run, std::cout, std::cerr); }
