// Slurm hostlist syntax ("node[01-16],gpu7") through libslurm's own parser, so Saker
// reads node sets exactly as Slurm does. Inside a daemon the symbols come from the
// daemon itself; programs link -lslurm.
#pragma once

#include <string>
#include <vector>

namespace saker::hostlist {

// Expands a hostlist expression into host names, in order. Throws saker::Error on
// a malformed expression, naming it.
std::vector<std::string> expand(const std::string& expression);

// The shortest hostlist expression for these hosts (sorted, ranges merged).
std::string compress(const std::vector<std::string>& hosts);

}  // namespace saker::hostlist
