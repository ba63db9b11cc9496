// Cross-checks Slurm's gres.conf GPU lines against the node's topology: Slurm binds
// and numbers GPUs by gres.conf, Saker by the topology, and when the two disagree
// every rank is shifted. Each disagreement is reported on its own, with the line.
//
// Checked: File= (each /dev/nvidiaN, /dev/dri/renderD(128+N) names GPU N, which must
// exist and be of that vendor; lines must list GPUs in ascending order, as Slurm
// numbers them in file order), Cores= (Slurm's logical core indexes must be exactly
// the cores next to each of the line's GPUs), and Links= (one entry per GPU of the
// node, -1 at the GPU's own position). NVLink counts themselves are not in hwloc's
// topology and are not checked.
#pragma once

#include <string>
#include <vector>

#include "plugins/affinity/machine.hpp"

namespace saker::affinity {

// `node`: this node's name, for NodeName= lines (empty: every line applies).
// Returns one sentence per disagreement; empty when gres.conf matches.
std::vector<std::string> check_gres_conf(const Machine& machine, const std::string& gres_conf_text,
                                         const std::string& node = {});

// Expands "/dev/nvidia[0-3,5]" into its device paths. Throws saker::Error on bad syntax.
std::vector<std::string> expand_gres_files(const std::string& spec);

}  // namespace saker::affinity
