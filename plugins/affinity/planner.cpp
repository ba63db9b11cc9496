#include "plugins/affinity/planner.hpp"

#include <algorithm>
#include <map>
#include <numeric>

#include "common/error.hpp"

namespace saker::affinity {
namespace {

// Block distribution: rank r of k over n slots gets slot floor(r*n/k). With k == n this
// is the identity; with k < n ranks are spread evenly (one per socket before two on
// one); with k > n consecutive ranks share a slot.
std::size_t block(std::size_t r, std::size_t k, std::size_t n) { return r * n / k; }

void assign_gpus(const Machine& m, const Request& req, std::vector<RankPlan>& ranks) {
  std::vector<unsigned> order;  // the step's GPUs in topology order: by NUMA domain, then PCI
  for (unsigned g : req.gpus.physical) {
    if (g >= m.gpus.size())
      throw Error(explain("the step was given GPU " + std::to_string(g) + ", but the topology of " +
                              (m.hostname.empty() ? std::string("this node") : m.hostname) + " has " +
                              std::to_string(m.gpus.size()) + " GPU(s)",
                          "gres.conf and the topology disagree (a stale topology file, or GPUs hidden from hwloc)",
                          "check gres.conf against `saker-topo show`, or point topology= at the right file"));
    order.push_back(g);
  }
  std::stable_sort(order.begin(), order.end(), [&](unsigned a, unsigned b) { return m.gpus[a].numa < m.gpus[b].numa; });
  const std::size_t k = ranks.size(), n = order.size();
  if (req.sharing == GpuSharing::exclusive && k > n)
    throw Error(explain(std::to_string(k) + " ranks on this node but the step has " + std::to_string(n) + " GPU(s)",
                        "each rank gets a GPU of its own (exclusive mode)",
                        "request one GPU per task (--gpus-per-task=1) or fewer tasks per node; to let ranks share "
                        "GPUs, plan with `saker-topo plan --shared-gpus`; or run with --gpu-affinity=none"));
  for (std::size_t r = 0; r < k; ++r) {
    ranks[r].gpu = order[block(r, k, n)];
    ranks[r].numa = m.gpus[*ranks[r].gpu].numa;
  }
}

std::vector<std::size_t> allowed_cores(const Machine& m, std::size_t numa, const std::optional<IndexList>& allowed) {
  std::vector<std::size_t> out;
  for (std::size_t c : m.numas[numa].cores)
    if (!allowed || !intersect(m.cores[c].pus, *allowed).empty()) out.push_back(c);
  return out;
}

void assign_numa_without_gpus(const Machine& m, const Request& req, std::vector<RankPlan>& ranks) {
  std::vector<std::size_t> usable;
  for (std::size_t i = 0; i < m.numas.size(); ++i)
    if (!allowed_cores(m, i, req.allowed).empty()) usable.push_back(i);
  if (usable.empty())
    throw Error(explain("no core of this node is inside the allowed CPUs " + format_index_list(*req.allowed),
                        "the allowed cpuset and the topology share no CPU (is the topology file from another machine?)",
                        "point topology= at this node's topology, or run with --gpu-affinity=none"));
  for (std::size_t r = 0; r < ranks.size(); ++r) ranks[r].numa = usable[block(r, ranks.size(), usable.size())];
}

std::string gpu_label(const Machine& m, unsigned g) { return "GPU " + std::to_string(g) + " (" + m.gpus[g].pci_bus_id + ")"; }

// The ranks that share a NUMA node split its allowed cores into contiguous blocks,
// in rank order; with fewer cores than ranks each rank gets one core, shared.
void assign_cores(const Machine& m, const Request& req, std::vector<RankPlan>& ranks) {
  for (std::size_t numa = 0; numa < m.numas.size(); ++numa) {
    std::vector<std::size_t> members;
    for (std::size_t r = 0; r < ranks.size(); ++r)
      if (ranks[r].numa == numa) members.push_back(r);
    if (members.empty()) continue;
    const auto cores = allowed_cores(m, numa, req.allowed);
    if (cores.empty()) {
      const RankPlan& first = ranks[members.front()];
      throw Error(explain(
          "rank " + std::to_string(first.rank) + ": " + (first.gpu ? gpu_label(m, *first.gpu) + " is local to " : "") +
              "NUMA node " + std::to_string(m.numas[numa].os_index) + " (CPUs " + format_index_list(m.numas[numa].pus) +
              "), and all of those CPUs are outside the job's CPUs (" +
              (req.allowed ? format_index_list(*req.allowed) : std::string("all")) + ")",
          "the job holds no core on the socket of its GPU",
          "ask Slurm for cores next to the GPUs (--gres-flags=enforce-binding, or more --cpus-per-task), "
          "or run with --gpu-affinity=none"));
    }
    const std::size_t k = members.size(), c = cores.size();
    for (std::size_t j = 0; j < k; ++j) {
      RankPlan& rp = ranks[members[j]];
      if (c >= k) {
        for (std::size_t i = j * c / k; i < (j + 1) * c / k; ++i) rp.cores.push_back(cores[i]);
      } else {
        rp.cores.push_back(cores[block(j, k, c)]);
        rp.cores_shared = true;
      }
      for (std::size_t core : rp.cores) {
        const auto& pus = m.cores[core].pus;
        const auto mine = req.allowed ? intersect(pus, *req.allowed) : pus;
        rp.pus.insert(rp.pus.end(), mine.begin(), mine.end());
      }
      std::sort(rp.pus.begin(), rp.pus.end());
    }
  }
}

// Nearest NIC(s) by hops in the PCI tree. RDMA adapters win over plain Ethernet when
// the node has any, so the management port never becomes NCCL's transport. Ranks
// whose nearest NICs are the same equally near set share that set out evenly, in
// rank order: k ranks over c NICs get one NIC each in blocks when k >= c, and c/k
// NICs each when there are more NICs than ranks, so every card carries traffic.
std::vector<std::size_t> nearest_nics(const Machine& m, const RankPlan& rp) {
  std::vector<std::size_t> out;
  if (m.nics.empty()) return out;
  const bool any_rdma = std::any_of(m.nics.begin(), m.nics.end(), [](const Nic& n) { return n.rdma(); });
  const auto& row = rp.gpu ? m.gpu_nic_hops[*rp.gpu] : m.numa_nic_hops[rp.numa];
  unsigned best = ~0u;
  for (std::size_t i = 0; i < m.nics.size(); ++i)
    if (m.nics[i].rdma() == any_rdma) best = std::min(best, row[i]);
  for (std::size_t i = 0; i < m.nics.size(); ++i)
    if (m.nics[i].rdma() == any_rdma && row[i] == best) out.push_back(i);
  return out;
}

void assign_nics(const Machine& m, std::vector<RankPlan>& ranks) {
  std::vector<std::vector<std::size_t>> candidates;
  for (const auto& rp : ranks) candidates.push_back(nearest_nics(m, rp));
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    std::size_t j = 0, k = 0;  // this rank's position among the ranks with the same set, and their count
    for (std::size_t o = 0; o < ranks.size(); ++o) {
      if (candidates[o] != candidates[r]) continue;
      if (o < r) ++j;
      ++k;
    }
    const auto& set = candidates[r];
    const std::size_t c = set.size();
    if (c == 0) continue;
    if (k >= c) {
      ranks[r].nics.push_back(set[block(j, k, c)]);
    } else {
      for (std::size_t i = j * c / k; i < (j + 1) * c / k; ++i) ranks[r].nics.push_back(set[i]);
    }
  }
}

std::string join(const std::vector<std::string>& parts, char sep) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : std::string(1, sep)) + p;
  return out;
}

void build_env(const Machine& m, const Request& req, const std::vector<RankPlan>& all, RankPlan& rp) {
  if (rp.gpu) {
    // Own GPU first, then the other ranks' GPUs in rank order, then any the step holds
    // that no rank drives: everything stays visible so CUDA IPC and NVLink work.
    std::vector<unsigned> order{*rp.gpu};
    for (const auto& other : all)
      if (other.gpu && std::find(order.begin(), order.end(), *other.gpu) == order.end()) order.push_back(*other.gpu);
    for (unsigned g : req.gpus.physical)
      if (std::find(order.begin(), order.end(), g) == order.end()) order.push_back(g);
    // Each vendor's runtime is told about its own GPUs only: an AMD card in
    // CUDA_VISIBLE_DEVICES would name a device CUDA does not have.
    std::vector<std::string> nvidia, amd;
    for (unsigned g : order) {
      const auto pos = std::find(req.gpus.physical.begin(), req.gpus.physical.end(), g) - req.gpus.physical.begin();
      (m.gpus[g].vendor == GpuVendor::amd ? amd : nvidia).push_back(req.gpus.tokens[pos]);
    }
    if (!nvidia.empty()) rp.env.emplace_back("CUDA_VISIBLE_DEVICES", join(nvidia, ','));
    if (!amd.empty()) {
      rp.env.emplace_back("ROCR_VISIBLE_DEVICES", join(amd, ','));
      rp.env.emplace_back("HIP_VISIBLE_DEVICES", join(amd, ','));
    }
  }
  std::vector<std::string> hcas, ucx;
  for (std::size_t i : rp.nics) {
    const Nic& n = m.nics[i];
    if (n.rdma()) hcas.push_back(n.hca + ":" + std::to_string(n.port));
    ucx.push_back(n.rdma() ? n.hca + ":" + std::to_string(n.port) : n.netdev);
  }
  // "=" makes NCCL match names exactly (mlx5_1 would otherwise also pick mlx5_10).
  if (!hcas.empty()) rp.env.emplace_back("NCCL_IB_HCA", "=" + join(hcas, ','));
  if (!ucx.empty()) rp.env.emplace_back("UCX_NET_DEVICES", join(ucx, ','));
  rp.env.emplace_back("OMP_NUM_THREADS", std::to_string(rp.cores_shared ? 1 : rp.cores.size()));
  // Thread pinning is opt-in (omp_bind.hpp): with OMP_PLACES set, libgomp pins the task's
  // initial thread to the first place, and all it starts later inherits that one core.
  if (req.omp_bind == OmpBind::none) return;
  std::vector<std::string> places;
  for (std::size_t core : rp.cores) {
    const auto& pus = m.cores[core].pus;
    places.push_back("{" + join([&] {
      std::vector<std::string> s;
      for (unsigned pu : req.allowed ? intersect(pus, *req.allowed) : pus) s.push_back(std::to_string(pu));
      return s;
    }(), ',') + "}");
  }
  rp.env.emplace_back("OMP_PLACES", join(places, ','));
  rp.env.emplace_back("OMP_PROC_BIND", std::string(omp_bind_name(req.omp_bind)));
}

bool task_setting_wins(const std::string& key) { return key.rfind("OMP_", 0) == 0; }

// The record an enclosing step's plan left (kPlanRecord): KEY=VALUE;KEY=VALUE. Only
// OMP_* keys count: the record may say what to replace or unset, and nothing else.
std::map<std::string, std::string> parse_record(const std::string& text) {
  std::map<std::string, std::string> out;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = std::min(text.find(';', at), text.size());
    std::string item = text.substr(at, end - at);
    std::size_t eq = item.find('=');
    if (eq != std::string::npos && task_setting_wins(item.substr(0, eq))) out[item.substr(0, eq)] = item.substr(eq + 1);
    at = end + 1;
  }
  return out;
}

}  // namespace

TaskEnv task_env(const RankPlan& rank,
                 const std::function<std::optional<std::string>(const std::string&)>& task_value) {
  TaskEnv out;
  // A value equal to what an enclosing step's plan set (srun inside `srun --pty bash`
  // inherits it) is that plan's, not the user's: this step's plan replaces it.
  const auto inherited = parse_record(task_value(kPlanRecord).value_or(""));
  const auto from_enclosing_plan = [&](const std::string& key, const std::string& value) {
    auto it = inherited.find(key);
    return it != inherited.end() && it->second == value;
  };
  std::string record;
  for (const auto& [key, value] : rank.env) {
    if (task_setting_wins(key)) {
      if (auto own = task_value(key); own && !from_enclosing_plan(key, *own)) {
        out.kept.emplace_back(key, std::move(*own));
        continue;
      }
      record += (record.empty() ? "" : ";") + key + "=" + value;
    }
    out.set.emplace_back(key, value);
  }
  // What the enclosing plan set and this one does not (its OMP_PLACES under
  // --omp-bind=close, this step's none) goes, unless the user changed it since.
  for (const auto& [key, value] : inherited) {
    bool planned = std::any_of(rank.env.begin(), rank.env.end(), [&](const auto& kv) { return kv.first == key; });
    if (!planned && task_value(key) == std::optional<std::string>(value)) out.unset.push_back(key);
  }
  out.set.emplace_back(kPlanRecord, record);
  return out;
}

Plan make_plan(const Machine& m, const Request& req) {
  if (req.local_tasks == 0)
    throw Error(explain("cannot plan for 0 local tasks", "a step runs at least one task per node",
                        "pass the local task count (SLURM_STEP_NUM_TASKS on this node)"));
  if (m.cores.empty())
    throw Error(explain("the topology has no cores", "hwloc found no Core objects",
                        "check the topology with `lstopo --input FILE`"));
  if (req.gpus.physical.size() != req.gpus.tokens.size())
    throw Error("saker: internal: step GPU list and CUDA tokens differ in length");
  std::vector<RankPlan> ranks(req.local_tasks);
  for (unsigned r = 0; r < req.local_tasks; ++r) ranks[r].rank = r;
  if (req.gpus.physical.empty()) {
    assign_numa_without_gpus(m, req, ranks);
  } else {
    assign_gpus(m, req, ranks);
  }
  assign_cores(m, req, ranks);
  assign_nics(m, ranks);
  for (auto& rp : ranks) build_env(m, req, ranks, rp);
  return Plan{std::move(ranks)};
}

}  // namespace saker::affinity
