// How a plan is shown: the table `--gpu-affinity=explain` prints on the task's stderr
// and `saker-topo plan` prints on stdout (the same function, so they cannot drift),
// and a one-line-per-rank KEY=VALUE form that scripts and tests compare.
#pragma once

#include <string>

#include "plugins/affinity/machine.hpp"
#include "plugins/affinity/planner.hpp"

namespace saker::affinity {

std::string format_plan_table(const Machine& machine, const Request& request, const Plan& plan);
// "rank=0 gpu=0 numa=0 cpus=0-3 CUDA_VISIBLE_DEVICES=0,1 ..." per line.
std::string format_plan_env(const Plan& plan, const Machine& machine);
// What `saker-topo show` prints: GPUs, NUMA nodes, cores and NICs with hop distances.
std::string format_machine(const Machine& machine);

}  // namespace saker::affinity
