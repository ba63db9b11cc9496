// node_record_from_env (node_record.hpp): a template so that tests can pass a map.
#pragma once

#include <cstdlib>
#include <exception>

namespace saker::spank {

template <typename Getenv>
NodeRecord node_record_from_env(std::uint32_t job_id, Getenv get) {
  NodeRecord r;
  r.job_id = job_id;
  if (const char* v = get("SLURM_JOB_UID")) r.uid = static_cast<std::uint32_t>(std::strtoul(v, nullptr, 10));
  if (const char* v = get("SLURM_JOB_USER")) r.user = v;
  if (const char* v = get("SLURM_JOB_ACCOUNT")) r.account = v;
  if (const char* v = get("SLURM_JOB_PARTITION")) r.partition = v;
  // Slurm 22.05's prolog gets SLURM_NODELIST; later releases also SLURM_JOB_NODELIST.
  if (const char* v = get("SLURM_JOB_NODELIST")) r.nodes = v;
  else if (const char* w = get("SLURM_NODELIST")) r.nodes = w;
  if (const char* v = get("SLURM_JOB_RESTART_COUNT")) r.restart_count = static_cast<std::uint32_t>(std::strtoul(v, nullptr, 10));
  if (const char* v = get("SPANK_SAKER_DATASETS")) {
    try {
      r.datasets = policy::parse_dataset_list(v);
    } catch (const std::exception& e) {
      r.problem = std::string("the job's dataset list is malformed: ") + e.what();
    }
  }
  return r;
}

}  // namespace saker::spank
