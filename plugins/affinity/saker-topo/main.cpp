// saker-topo: shows a node's topology as Saker's affinity planner sees it, and prints
// the per-rank plan spank_saker.so would apply (same library, same table).
//
//   saker-topo show [--topology FILE.xml]
//   saker-topo plan --topology FILE.xml --ntasks-per-node N [--gpus LIST] [--cpuset LIST]
//                   [--shared-gpus] [--format table|env]
//
// Exit codes: 0 success, 1 the plan is impossible (the reason is printed),
// 2 bad usage, 3 the topology cannot be loaded.
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "plugins/affinity/plan_table.hpp"
#include "plugins/affinity/planner.hpp"
#include "plugins/affinity/topology.hpp"

namespace po = boost::program_options;
namespace aff = saker::affinity;

namespace {

constexpr int kOk = 0, kImpossible = 1, kUsage = 2, kNoTopology = 3;

const char* kUsageText =
    "Usage: saker-topo show [--topology FILE.xml]\n"
    "       saker-topo plan --topology FILE.xml --ntasks-per-node N [--gpus LIST] [--cpuset LIST]\n"
    "                       [--shared-gpus] [--format table|env]\n"
    "\n"
    "show   prints the NUMA nodes (cores, CPUs), the GPUs (PCI address, NUMA node) and the NICs\n"
    "       with their PCI tree distance (hops) to every GPU and NUMA node. Without --topology\n"
    "       it discovers this machine.\n"
    "plan   prints, for each local rank, the GPU, CPUs, NUMA node, NICs and the environment\n"
    "       (CUDA_VISIBLE_DEVICES, NCCL_IB_HCA, UCX_NET_DEVICES, OMP_*) that spank_saker.so\n"
    "       would apply to a step with these GPUs (SLURM_STEP_GPUS) and allowed CPUs.\n"
    "\n"
    "Exit codes: 0 success, 1 impossible plan (reason printed), 2 bad usage, 3 topology not loaded.\n";

aff::Machine load(const std::string& path) { return path.empty() ? aff::load_live() : aff::load_xml_file(path); }

}  // namespace

int main(int argc, char** argv) {
  std::string command, topology, gpus, cpuset, format = "table";
  unsigned ntasks = 0;
  bool shared = false;
  po::options_description opts("Options");
  opts.add_options()("help,h", "show this help")("topology", po::value(&topology), "hwloc XML file")(
      "ntasks-per-node", po::value(&ntasks), "local tasks (plan)")("gpus", po::value(&gpus),
                                                                    "the step's GPU indexes, e.g. 0-3 (plan)")(
      "cpuset", po::value(&cpuset), "allowed CPUs, e.g. 0-15 (plan; default: all)")(
      "shared-gpus", po::bool_switch(&shared), "let ranks share GPUs when there are more ranks than GPUs")(
      "format", po::value(&format), "table (default) or env: one KEY=VALUE line per rank");
  po::options_description all;
  all.add(opts).add_options()("command", po::value(&command));
  po::positional_options_description pos;
  pos.add("command", 1);
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
  if (command != "show" && command != "plan") {
    std::cerr << "saker-topo: " << (command.empty() ? "no command given" : "unknown command '" + command + "'")
              << "\n\n" << kUsageText;
    return kUsage;
  }
  if (command == "plan" && (topology.empty() || ntasks == 0 || (format != "table" && format != "env"))) {
    std::cerr << "saker-topo plan: needs --topology FILE.xml and --ntasks-per-node N (N >= 1); "
                 "--format is table or env\n\n" << kUsageText;
    return kUsage;
  }
  aff::Machine machine;
  try {
    machine = load(topology);
  } catch (const std::exception& e) {
    std::cerr << "saker-topo: " << e.what() << "\n";
    return kNoTopology;
  }
  if (command == "show") {
    std::cout << aff::format_machine(machine);
    return kOk;
  }
  try {
    aff::Request request;
    request.gpus = aff::step_gpus_from_list(gpus);
    if (!cpuset.empty()) request.allowed = aff::parse_index_list(cpuset, "--cpuset");
    request.local_tasks = ntasks;
    request.sharing = shared ? aff::GpuSharing::shared : aff::GpuSharing::exclusive;
    const aff::Plan plan = aff::make_plan(machine, request);
    std::cout << (format == "env" ? aff::format_plan_env(plan, machine)
                                  : aff::format_plan_table(machine, request, plan));
    return kOk;
  } catch (const std::exception& e) {
    std::cerr << "saker-topo: " << e.what() << "\n";
    return kImpossible;
  }
}
