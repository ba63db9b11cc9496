#include "sweep/submit.hpp"

namespace saker::sweep {

std::string array_ranges(const std::vector<std::size_t>& ids) {
  std::string out;
  for (std::size_t i = 0; i < ids.size();) {
    std::size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(ids[i]) + (j > i ? "-" + std::to_string(ids[j]) : "");
    i = j + 1;
  }
  return out;
}

std::vector<std::size_t> unfinished(const std::vector<TrialState>& states) {
  std::vector<std::size_t> out;
  for (const TrialState& t : states)
    if (!t.finished()) out.push_back(t.id);
  return out;
}

namespace {
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}
}  // namespace

std::string batch_script(const Spec& spec, const std::string& program) {
  return "#!/bin/sh\n"
         "# Written by saker-sweep submit: one task of sweep " + spec.name + "'s job array.\n"
         "# The task id is the trial id; saker-sweep trial runs it rung by rung, resuming\n"
         "# from the trial's own checkpoints after a requeue (saker-sweep(1)).\n"
         "exec " + quoted(program) + " trial " + quoted(spec.dir.string()) + "\n";
}

std::vector<std::string> sbatch_argv(const Spec& spec, const std::vector<std::size_t>& ids, const std::string& script) {
  std::string array = "--array=" + array_ranges(ids);
  if (spec.slurm.concurrency > 0) array += "%" + std::to_string(spec.slurm.concurrency);
  std::vector<std::string> argv = {"sbatch", "--parsable", array, "--job-name=sweep-" + spec.name,
                                   // A preempted or failed node's task comes back and resumes
                                   // its trial; its log continues instead of starting over.
                                   "--requeue", "--open-mode=append", "--chdir=" + spec.base.string(),
                                   "--output=" + (spec.dir / "slurm" / "%A_%a.out").string()};
  if (!spec.slurm.datasets.empty()) argv.push_back("--dataset=" + spec.slurm.datasets);
  argv.insert(argv.end(), spec.slurm.options.begin(), spec.slurm.options.end());
  argv.push_back(script);
  return argv;
}

}  // namespace saker::sweep
