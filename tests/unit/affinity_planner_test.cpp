#include <catch2/catch.hpp>

#include <map>

#include "common/error.hpp"
#include "plugins/affinity/plan_table.hpp"
#include "plugins/affinity/planner.hpp"
#include "plugins/affinity/topology.hpp"

using namespace saker::affinity;

namespace {

const Machine& machine(const std::string& name) {
  static std::map<std::string, Machine> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, load_xml_file(std::string(SAKER_TEST_DATA) + "/" + name)).first;
  return it->second;
}

const Machine& dgx() { return machine("topo-dgx-2s-8gpu-4nic.xml"); }

Request request(const char* gpus, unsigned tasks, const char* allowed = nullptr) {
  Request r;
  if (gpus != nullptr) r.gpus = step_gpus_from_list(gpus);
  r.local_tasks = tasks;
  if (allowed != nullptr) r.allowed = parse_index_list(allowed, "allowed");
  return r;
}

std::string env(const RankPlan& rp, const std::string& key) {
  for (const auto& [k, v] : rp.env)
    if (k == key) return v;
  return "<unset>";
}

}  // namespace

TEST_CASE("affinity planner, DGX-like: 8 ranks on 8 GPUs get their own GPU, 4 cores and the HCA on their switch") {
  const Plan plan = make_plan(dgx(), request("0-7", 8));
  REQUIRE(plan.ranks.size() == 8);
  for (unsigned r = 0; r < 8; ++r) {
    CAPTURE(r);
    CHECK(plan.ranks[r].gpu == r);
    CHECK(plan.ranks[r].numa == (r < 4 ? 0u : 1u));
    CHECK(plan.ranks[r].cores.size() == 4);
    CHECK(env(plan.ranks[r], "NCCL_IB_HCA") == "=mlx5_" + std::to_string(r / 2) + ":1");
    CHECK(env(plan.ranks[r], "UCX_NET_DEVICES") == "mlx5_" + std::to_string(r / 2) + ":1");
    CHECK(env(plan.ranks[r], "OMP_NUM_THREADS") == "4");
    CHECK(env(plan.ranks[r], "OMP_PROC_BIND") == "close");
  }
  CHECK(plan.ranks[0].pus == parse_index_list("0-3,32-35", "t"));
  CHECK(plan.ranks[5].pus == parse_index_list("20-23,52-55", "t"));
  CHECK(env(plan.ranks[0], "OMP_PLACES") == "{0,32},{1,33},{2,34},{3,35}");
  // Own GPU first, every step GPU still visible (CUDA IPC / NVLink keep working).
  CHECK(env(plan.ranks[0], "CUDA_VISIBLE_DEVICES") == "0,1,2,3,4,5,6,7");
  CHECK(env(plan.ranks[3], "CUDA_VISIBLE_DEVICES") == "3,0,1,2,4,5,6,7");
  CHECK(env(plan.ranks[7], "CUDA_VISIBLE_DEVICES") == "7,0,1,2,3,4,5,6");
  // The plain Ethernet port never wins over an HCA.
  for (const auto& rp : plan.ranks) CHECK(std::find(rp.nics.begin(), rp.nics.end(), 0u) == rp.nics.end());
}

TEST_CASE("affinity planner, DGX-like: fewer ranks than GPUs are spread over both sockets") {
  const Plan plan = make_plan(dgx(), request("0-7", 2));
  CHECK(plan.ranks[0].gpu == 0u);
  CHECK(plan.ranks[1].gpu == 4u);
  CHECK(plan.ranks[1].pus == parse_index_list("16-31,48-63", "t"));
  CHECK(env(plan.ranks[1], "CUDA_VISIBLE_DEVICES") == "4,0,1,2,3,5,6,7");
}

TEST_CASE("affinity planner: cores stay inside the allowed cpuset and are split fairly") {
  const Plan plan = make_plan(dgx(), request("0-3", 4, "0-5"));
  CHECK(plan.ranks[0].pus == IndexList{0});
  CHECK(plan.ranks[1].pus == IndexList{1, 2});
  CHECK(plan.ranks[2].pus == IndexList{3});
  CHECK(plan.ranks[3].pus == IndexList{4, 5});
  CHECK(env(plan.ranks[1], "OMP_PLACES") == "{1},{2}");
  for (const auto& rp : plan.ranks) CHECK_FALSE(rp.cores_shared);
}

TEST_CASE("affinity planner: ConstrainDevices renumbering reaches CUDA_VISIBLE_DEVICES") {
  Request req = request(nullptr, 4);
  req.gpus = step_gpus_from_env("4,5,6,7", "0,1,2,3");
  const Plan plan = make_plan(dgx(), req);
  CHECK(plan.ranks[0].gpu == 4u);
  CHECK(env(plan.ranks[0], "CUDA_VISIBLE_DEVICES") == "0,1,2,3");
  CHECK(env(plan.ranks[2], "CUDA_VISIBLE_DEVICES") == "2,0,1,3");
  CHECK(env(plan.ranks[2], "NCCL_IB_HCA") == "=mlx5_3:1");
  CHECK(plan.ranks[2].numa == 1);
}

TEST_CASE("affinity planner: impossible requests say why") {
  CHECK_THROWS_WITH(make_plan(dgx(), request("0-7", 9)),
                    Catch::Contains("9 ranks") && Catch::Contains("8 GPU(s)") && Catch::Contains("--gpus-per-task"));
  CHECK_THROWS_WITH(make_plan(dgx(), request("0-7", 8, "0-15,32-47")),
                    Catch::Contains("rank 4: GPU 4 (0000:82:00.0) is local to NUMA node 1 (CPUs 16-31,48-63)") &&
                        Catch::Contains("outside the job's CPUs (0-15,32-47)"));
  CHECK_THROWS_WITH(make_plan(dgx(), request("8", 1)), Catch::Contains("GPU 8") && Catch::Contains("8 GPU(s)"));
  CHECK_THROWS_WITH(make_plan(machine("topo-2s-cpu-only.xml"), request(nullptr, 2, "100-101")),
                    Catch::Contains("no core of this node"));
  CHECK_THROWS_AS(make_plan(dgx(), request("0", 0)), saker::Error);
}

TEST_CASE("affinity planner: shared mode puts consecutive ranks on one GPU") {
  Request req = request("0,1", 4);
  req.sharing = GpuSharing::shared;
  const Plan plan = make_plan(dgx(), req);
  CHECK(plan.ranks[1].gpu == 0u);
  CHECK(plan.ranks[2].gpu == 1u);
  CHECK(env(plan.ranks[2], "CUDA_VISIBLE_DEVICES") == "1,0");
}

TEST_CASE("affinity planner, 1-socket 4-GPU node: two cores each, the HCA behind the same switch") {
  const Plan plan = make_plan(machine("topo-1s-4gpu.xml"), request("0-3", 4));
  CHECK(plan.ranks[0].pus == parse_index_list("0-1,8-9", "t"));
  CHECK(plan.ranks[3].pus == parse_index_list("6-7,14-15", "t"));
  CHECK(env(plan.ranks[1], "UCX_NET_DEVICES") == "mlx5_0:1");
  CHECK(env(plan.ranks[2], "UCX_NET_DEVICES") == "mlx5_1:1");
  const Plan one = make_plan(machine("topo-1s-4gpu.xml"), request("2", 1));
  CHECK(env(one.ranks[0], "CUDA_VISIBLE_DEVICES") == "2");
  CHECK(env(one.ranks[0], "NCCL_IB_HCA") == "=mlx5_1:1");
  CHECK(one.ranks[0].cores.size() == 8);
}

TEST_CASE("affinity planner, CPU-only node: ranks spread over NUMA nodes, no CUDA variable") {
  const Plan plan = make_plan(machine("topo-2s-cpu-only.xml"), request(nullptr, 4));
  CHECK(plan.ranks[1].numa == 0);
  CHECK(plan.ranks[2].numa == 1);
  CHECK(plan.ranks[0].pus == parse_index_list("0-1,8-9", "t"));
  CHECK(plan.ranks[3].pus == parse_index_list("6-7,14-15", "t"));
  CHECK(env(plan.ranks[0], "CUDA_VISIBLE_DEVICES") == "<unset>");
  CHECK(env(plan.ranks[0], "UCX_NET_DEVICES") == "mlx5_0:1");  // the only HCA beats local Ethernet
}

TEST_CASE("affinity planner, GPUs without NICs: no NCCL/UCX variables, sub-NUMA locality kept") {
  const Plan plan = make_plan(machine("topo-snc2-4gpu-no-nic.xml"), request("0-3", 4));
  CHECK(plan.ranks[2].pus == IndexList{4, 5});
  CHECK(plan.ranks[2].numa == 1);
  CHECK(env(plan.ranks[2], "NCCL_IB_HCA") == "<unset>");
  CHECK(env(plan.ranks[2], "UCX_NET_DEVICES") == "<unset>");
  CHECK(env(plan.ranks[2], "OMP_NUM_THREADS") == "2");
}

TEST_CASE("affinity planner, integration node: 4 ranks on 2 cores share them in pairs") {
  const Plan plan = make_plan(machine("topo-itest-2cpu-4gpu.xml"), request("0-3", 4, "0-1"));
  CHECK(plan.ranks[0].pus == IndexList{0});
  CHECK(plan.ranks[1].pus == IndexList{0});
  CHECK(plan.ranks[2].pus == IndexList{1});
  CHECK(plan.ranks[3].cores_shared);
  CHECK(env(plan.ranks[3], "OMP_NUM_THREADS") == "1");
  CHECK(env(plan.ranks[3], "NCCL_IB_HCA") == "=mlx5_1:1");
}

TEST_CASE("affinity planner: plans and tables are deterministic") {
  const Request req = request("0-7", 8, "0-63");
  const Plan a = make_plan(dgx(), req), b = make_plan(dgx(), req);
  CHECK(format_plan_env(a, dgx()) == format_plan_env(b, dgx()));
  const std::string table = format_plan_table(dgx(), req, a);
  CHECK(table == format_plan_table(dgx(), req, b));
  CHECK_THAT(table, Catch::Contains("CUDA_VISIBLE_DEVICES") && Catch::Contains("8 local rank(s)"));
  CHECK_THAT(format_plan_env(a, dgx()), Catch::StartsWith("rank=0 gpu=0 numa=0 cpus=0-3,32-35 CUDA_VISIBLE_DEVICES="));
}
