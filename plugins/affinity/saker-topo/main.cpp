// saker-topo: shows a node's topology as Saker's affinity planner sees it, prints
// the per-rank plan spank_saker.so would apply (same library, same table), and
// checks Slurm's gres.conf against the topology.
//
//   saker-topo show [--topology FILE.xml]
//   saker-topo plan [--topology FILE.xml] --ntasks-per-node N [--gpus LIST] [--cpuset LIST]
//                   [--shared-gpus] [--omp-bind none|close|spread] [--format table|env]
//   saker-topo check-gres GRES.CONF [--topology FILE.xml] [--node NAME]
//
// Exit codes: 0 success, 1 the plan is impossible or gres.conf disagrees (the reasons
// are printed), 2 bad usage, 3 the topology cannot be loaded.
#include <boost/program_options.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "common/version.hpp"
#include "common/error.hpp"
#include "plugins/affinity/gres_check.hpp"
#include "plugins/affinity/plan_table.hpp"
#include "plugins/affinity/planner.hpp"
#include "plugins/affinity/topology.hpp"

namespace po = boost::program_options;
namespace aff = saker::affinity;

namespace {

constexpr int kOk = 0, kImpossible = 1, kUsage = 2, kNoTopology = 3;

const char* kUsageText =
    "Usage: saker-topo show [--topology FILE.xml]\n"
    "       saker-topo plan [--topology FILE.xml] --ntasks-per-node N [--gpus LIST] [--cpuset LIST]\n"
    "                       [--shared-gpus] [--omp-bind none|close|spread] [--format table|env]\n"
    "       saker-topo check-gres GRES.CONF [--topology FILE.xml] [--node NAME]\n"
    "\n"
    "show        prints the NUMA nodes (cores, CPUs), the GPUs (PCI address, vendor, NUMA node, and\n"
    "            how they are numbered) and the NICs with their PCI tree distance (hops) to every\n"
    "            GPU and NUMA node.\n"
    "plan        prints, for each local rank, the GPU, CPUs, NUMA node, NICs and the environment\n"
    "            (CUDA_VISIBLE_DEVICES or ROCR/HIP_VISIBLE_DEVICES, NCCL_IB_HCA, UCX_NET_DEVICES,\n"
    "            OMP_*) that spank_saker.so would apply to a step with these GPUs (SLURM_STEP_GPUS),\n"
    "            allowed CPUs (default: the CPUs the topology says were allowed) and --omp-bind.\n"
    "check-gres  compares gres.conf's GPU lines (File=, Cores=, Links=) with the topology and\n"
    "            prints every disagreement.\n"
    "Without --topology each command discovers this machine.\n"
    "\n"
    "Exit codes: 0 success, 1 impossible plan or gres.conf disagrees (reasons printed), 2 bad usage,\n"
    "3 topology not loaded.\n";

aff::Machine load(const std::string& path) { return path.empty() ? aff::load_live() : aff::load_xml_file(path); }

int check_gres(const aff::Machine& machine, const std::string& file, const std::string& node) {
  std::ifstream in(file);
  if (!in) {
    std::cerr << "saker-topo check-gres: cannot read " << file << ": " << std::strerror(errno)
              << " (fix: name the node's gres.conf, e.g. /etc/slurm/gres.conf)\n";
    return kNoTopology;  // saker(7): an input that cannot be read is 3
  }
  std::ostringstream text;
  text << in.rdbuf();
  const auto problems = aff::check_gres_conf(machine, text.str(), node);
  for (const auto& p : problems) std::cout << p << "\n";
  if (problems.empty()) std::cout << "gres.conf agrees with the topology (" << machine.gpus.size() << " GPU(s))\n";
  return problems.empty() ? kOk : kImpossible;
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
  return kOk;
}

}  // namespace

int main(int argc, char** argv) {
  if (saker::print_version_if_asked(argc, argv, "saker-topo")) return 0;
  std::string command, file, topology, gpus, cpuset, node, format = "table", omp_bind = "none";
  unsigned ntasks = 0;
  bool shared = false;
  po::options_description opts("Options");
  opts.add_options()("help,h", "show this help")("version", "print Saker's version (first argument only)")("topology", po::value(&topology), "hwloc XML file (default: this machine)")(
      "ntasks-per-node", po::value(&ntasks), "local tasks (plan)")("gpus", po::value(&gpus),
                                                                    "the step's GPU indexes, e.g. 0-3 (plan)")(
      "cpuset", po::value(&cpuset), "allowed CPUs, e.g. 0-15 (plan; default: the topology's allowed CPUs)")(
      "shared-gpus", po::bool_switch(&shared), "let ranks share GPUs when there are more ranks than GPUs")(
      "omp-bind", po::value(&omp_bind),
      "none (default), close or spread: as the job option, whether OMP_PLACES/OMP_PROC_BIND are set (plan)")(
      "format", po::value(&format), "table (default) or env: one KEY=VALUE line per rank")(
      "node", po::value(&node), "this node's name, for gres.conf NodeName= lines (check-gres)");
  po::options_description all;
  all.add(opts).add_options()("command", po::value(&command))("file", po::value(&file));
  po::positional_options_description pos;
  pos.add("command", 1).add("file", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "saker-topo: " << e.what() << "\n\n" << kUsageText << opts;
    return kUsage;
  }
  if (vm.count("help") != 0u) {
    std::cout << kUsageText << "\n" << opts;
    return kOk;
  }
  if (command != "show" && command != "plan" && command != "check-gres") {
    std::cerr << "saker-topo: " << (command.empty() ? "no command given" : "unknown command '" + command + "'")
              << "\n\n" << kUsageText;
    return kUsage;
  }
  if (command == "plan" && (ntasks == 0 || (format != "table" && format != "env"))) {
    std::cerr << "saker-topo plan: needs --ntasks-per-node N (N >= 1); --format is table or env\n\n" << kUsageText;
    return kUsage;
  }
  aff::OmpBind bind = aff::OmpBind::none;
  try {
    bind = aff::parse_omp_bind(omp_bind, "saker-topo plan --omp-bind");
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n\n" << kUsageText;
    return kUsage;
  }
  if (command == "check-gres" && file.empty()) {
    std::cerr << "saker-topo check-gres: needs the gres.conf file to check\n\n" << kUsageText;
    return kUsage;
  }
  aff::Machine machine;
  try {
    machine = load(topology);
  } catch (const std::exception& e) {
    std::cerr << "saker-topo: " << e.what() << "\n";
    return kNoTopology;
  }
  try {
    if (command == "show") {
      std::cout << aff::format_machine(machine);
      return kOk;
    }
    if (command == "check-gres") return check_gres(machine, file, node);
    return plan(machine, gpus, cpuset, ntasks, shared, bind, format);
  } catch (const std::exception& e) {
    std::cerr << "saker-topo: " << e.what() << "\n";
    return kImpossible;
  }
}
