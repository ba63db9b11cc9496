// saker-sweep: hyperparameter sweeps as one Slurm job array, one checkpoint lineage per
// trial, with ASHA or median early stopping. All logic, the command line included, lives
// in libsaker_sweep (sweep/cli.hpp); this is the program around it. See saker-sweep(1)
// and saker-sweep.yaml(5).
#include <iostream>
#include <string>
#include <vector>

#include "common/version.hpp"
#include "sweep/cli.hpp"

int main(int argc, char** argv) {
  if (saker::print_version_if_asked(argc, argv, "saker-sweep")) return 0;
  return saker::sweep::run_cli(std::vector<std::string>(argv + 1, argv + argc), std::cout, std::cerr);
}
