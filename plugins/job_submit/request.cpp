#include "plugins/job_submit/request.hpp"

#include <cstring>

#include "common/slurm_compat.hpp"

namespace saker::job_submit {

std::uint32_t gpus_in_tres(const char* tres) {
  if (tres == nullptr) return 0;
  std::uint32_t total = 0;
  std::string s = tres;
  std::size_t start = 0;
  while (start < s.size()) {
    std::size_t end = s.find_first_of(",;", start);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(start, end - start);
    start = end + 1;
    for (const char* prefix : {"gres:", "gres/"})
      if (item.rfind(prefix, 0) == 0) item.erase(0, std::strlen(prefix));
    if (item.rfind("gpu", 0) != 0 || (item.size() > 3 && item[3] != ':' && item[3] != '=')) continue;
    const std::size_t sep = item.find_last_of(":=");
    if (sep == std::string::npos) { total += 1; continue; }  // "gpu" alone means one
    const std::string count = item.substr(sep + 1);
    if (!count.empty() && count.find_first_not_of("0123456789") == std::string::npos && count.size() < 9)
      total += static_cast<std::uint32_t>(std::stoul(count));
    else if (sep == 3)  // "gpu:a100" : a type and no count
      total += 1;
  }
  return total;
}

policy::JobRequest request_from(const job_desc_msg_t& job, std::uint32_t submit_uid) {
  policy::JobRequest q;
  q.uid = (job.user_id != NO_VAL && job.user_id != 0) ? job.user_id : submit_uid;
  const plugins::Identity id = plugins::identity_of(q.uid);
  q.user = id.user;
  q.groups = id.groups;
  if (job.account != nullptr) q.account = job.account;
  if (job.partition != nullptr) q.partition = job.partition;
  if (job.features != nullptr) q.features = job.features;
  q.datasets = policy::datasets_from_env(job.spank_job_env, job.spank_job_env_size);
  q.ntasks = job.num_tasks != NO_VAL ? job.num_tasks : 0;
  q.nodes = job.min_nodes != NO_VAL ? job.min_nodes : 0;
  q.gpus_per_task = gpus_in_tres(job.tres_per_task);
  const std::uint32_t per_job = gpus_in_tres(job.tres_per_job);
  const std::uint32_t per_node = gpus_in_tres(job.tres_per_node);
  q.gpus = per_job;
  if (q.gpus == 0 && per_node > 0) q.gpus = per_node * std::max<std::uint32_t>(q.nodes, 1);
  if (q.gpus == 0 && q.gpus_per_task > 0) q.gpus = q.gpus_per_task * std::max<std::uint32_t>(q.ntasks, 1);
  if (slurm_compat::job_id_field(job) != NO_VAL) q.job_id = slurm_compat::job_id_field(job);
  return q;
}

}  // namespace saker::job_submit

