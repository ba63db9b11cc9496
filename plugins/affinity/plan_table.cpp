#include "plugins/affinity/plan_table.hpp"

#include <algorithm>
#include <sstream>
#include <vector>

namespace saker::affinity {
namespace {

using Row = std::vector<std::string>;

std::string render(const std::vector<Row>& rows) {
  std::vector<std::size_t> width;
  for (const auto& row : rows)
    for (std::size_t i = 0; i < row.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], row[i].size());
    }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string env_value(const RankPlan& rp, const std::string& key) {
  for (const auto& [k, v] : rp.env)
    if (k == key) return v;
  return "-";
}

std::string nic_names(const Machine& m, const RankPlan& rp) {
  std::string out;
  for (std::size_t i : rp.nics) out += (out.empty() ? "" : ",") + m.nics[i].name();
  return out.empty() ? "-" : out;
}

}  // namespace

std::string format_plan_table(const Machine& m, const Request& req, const Plan& plan) {
  std::ostringstream head;
  head << "saker: affinity plan for " << (m.hostname.empty() ? "this node" : m.hostname) << ": "
       << plan.ranks.size() << " local rank(s), GPUs "
       << (req.gpus.physical.empty() ? "none" : format_index_list(IndexList(req.gpus.physical.begin(),
                                                                              req.gpus.physical.end())))
       << ", allowed CPUs " << (req.allowed ? format_index_list(*req.allowed) : "all") << "\n"
       << "saker: GPUs numbered by " << m.gpu_order << "\n"
       << "saker: OpenMP threads "
       << (req.omp_bind == OmpBind::none
               ? std::string("not pinned: OMP_NUM_THREADS only (omp-bind=none)")
               : "pinned: OMP_PROC_BIND=" + std::string(omp_bind_name(req.omp_bind)) +
                     " over OMP_PLACES, one place per core (omp-bind=" + std::string(omp_bind_name(req.omp_bind)) +
                     ")")
       << "\n";
  const bool amd = std::any_of(m.gpus.begin(), m.gpus.end(), [](const Gpu& g) { return g.vendor == GpuVendor::amd; });
  const std::string gpu_var = amd ? "ROCR_VISIBLE_DEVICES" : "CUDA_VISIBLE_DEVICES";
  std::vector<Row> rows{{"rank", "gpu", "pci", "numa", "cpus", "nics", gpu_var, "NCCL_IB_HCA", "UCX_NET_DEVICES",
                         "OMP_NUM_THREADS"}};
  for (const auto& rp : plan.ranks) {
    rows.push_back({std::to_string(rp.rank), rp.gpu ? std::to_string(*rp.gpu) : "-",
                    rp.gpu ? m.gpus[*rp.gpu].pci_bus_id : "-", std::to_string(m.numas[rp.numa].os_index),
                    format_index_list(rp.pus) + (rp.cores_shared ? " (shared)" : ""), nic_names(m, rp),
                    env_value(rp, gpu_var), env_value(rp, "NCCL_IB_HCA"),
                    env_value(rp, "UCX_NET_DEVICES"), env_value(rp, "OMP_NUM_THREADS")});
  }
  return head.str() + render(rows);
}

std::string format_plan_env(const Plan& plan, const Machine& m) {
  std::string out;
  for (const auto& rp : plan.ranks) {
    out += "rank=" + std::to_string(rp.rank) + " gpu=" + (rp.gpu ? std::to_string(*rp.gpu) : "-") +
           " numa=" + std::to_string(m.numas[rp.numa].os_index) + " cpus=" + format_index_list(rp.pus);
    for (const auto& [k, v] : rp.env) out += " " + k + "=" + v;
    out += "\n";
  }
  return out;
}

std::string format_machine(const Machine& m) {
  std::string out = "host: " + (m.hostname.empty() ? std::string("-") : m.hostname) + "\n\nNUMA nodes (cores by logical index):\n";
  // Cores are shown by logical index (topology order, as Slurm's Cores= counts
  // them): OS core numbers repeat in every package and would collapse into one range.
  std::vector<Row> numa_rows{{"numa", "cores", "cpus"}};
  for (const auto& n : m.numas)
    numa_rows.push_back({std::to_string(n.os_index), format_index_list(IndexList(n.cores.begin(), n.cores.end())),
                         format_index_list(n.pus)});
  if (m.allowed_pus != m.all_pus())
    out += "allowed CPUs (the exporting process's cpuset): " + format_index_list(m.allowed_pus) + "\n";
  out += render(numa_rows) + "\nGPUs" + (m.gpus.empty() ? std::string() : " (numbered by " + m.gpu_order + ")") + ":\n";
  std::vector<Row> gpu_rows{{"gpu", "pci", "vendor", "numa", "os devices"}};
  Row header{"nic", "pci", "numa", "rdma", "netdev"};
  for (const auto& g : m.gpus) {
    gpu_rows.push_back({std::to_string(g.index), g.pci_bus_id, vendor_name(g.vendor), std::to_string(m.numas[g.numa].os_index),
                        g.os_names.empty() ? "-" : g.os_names});
    header.push_back("hops gpu" + std::to_string(g.index));
  }
  out += (m.gpus.empty() ? std::string("(none)\n") : render(gpu_rows)) + "\nNICs (hops = PCI tree distance):\n";
  for (const auto& n : m.numas) header.push_back("hops numa" + std::to_string(n.os_index));
  std::vector<Row> nic_rows{header};
  for (std::size_t i = 0; i < m.nics.size(); ++i) {
    const Nic& n = m.nics[i];
    Row row{n.name(), n.pci_bus_id, std::to_string(m.numas[n.numa].os_index),
            n.rdma() ? n.hca + ":" + std::to_string(n.port) : "-", n.netdev.empty() ? "-" : n.netdev};
    for (std::size_t g = 0; g < m.gpus.size(); ++g) row.push_back(std::to_string(m.gpu_nic_hops[g][i]));
    for (std::size_t k = 0; k < m.numas.size(); ++k) row.push_back(std::to_string(m.numa_nic_hops[k][i]));
    nic_rows.push_back(std::move(row));
  }
  out += m.nics.empty() ? std::string("(none)\n") : render(nic_rows);
  return out;
}

}  // namespace saker::affinity
