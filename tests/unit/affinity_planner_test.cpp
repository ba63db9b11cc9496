#include <catch2/catch.hpp>

#include <map>
#include <optional>
#include <utility>

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
  }
  CHECK(plan.ranks[0].pus == parse_index_list("0-3,32-35", "t"));
  CHECK(plan.ranks[5].pus == parse_index_list("20-23,52-55", "t"));
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

// OpenMP thread binding inside a task is opt-in (--omp-bind): libgomp binds the task's
// initial thread to the first of OMP_PLACES at start-up, and everything started from it
// later (PyTorch's DataLoader workers, comm threads) inherits that one core.
TEST_CASE("affinity planner: by default a task gets OMP_NUM_THREADS only, no OMP_PLACES or OMP_PROC_BIND") {
  const Plan plan = make_plan(dgx(), request("0-7", 8));
  for (const auto& rp : plan.ranks) {
    CAPTURE(rp.rank);
    CHECK(env(rp, "OMP_NUM_THREADS") == "4");
    CHECK(env(rp, "OMP_PLACES") == "<unset>");
    CHECK(env(rp, "OMP_PROC_BIND") == "<unset>");
    CHECK(rp.pus.size() == 8);  // the task's own CPU mask is still the plan's
  }
  const Plan shared = make_plan(machine("topo-itest-2cpu-4gpu.xml"), request("0-3", 4, "0-1"));
  CHECK(env(shared.ranks[0], "OMP_NUM_THREADS") == "1");
  CHECK(env(shared.ranks[0], "OMP_PROC_BIND") == "<unset>");
  CHECK_THAT(format_plan_env(plan, dgx()), !Catch::Contains("OMP_PLACES") && !Catch::Contains("OMP_PROC_BIND"));
  CHECK_THAT(format_plan_table(dgx(), request("0-7", 8), plan),
             Catch::Contains("saker: OpenMP threads not pinned: OMP_NUM_THREADS only (omp-bind=none)"));
}

TEST_CASE("affinity planner: --omp-bind=close or spread adds one place per core and the bind policy") {
  for (const auto& [bind, name] : {std::pair{OmpBind::close, "close"}, std::pair{OmpBind::spread, "spread"}}) {
    CAPTURE(name);
    Request req = request("0-7", 8);
    req.omp_bind = bind;
    const Plan plan = make_plan(dgx(), req);
    CHECK(env(plan.ranks[0], "OMP_NUM_THREADS") == "4");
    CHECK(env(plan.ranks[0], "OMP_PLACES") == "{0,32},{1,33},{2,34},{3,35}");
    CHECK(env(plan.ranks[5], "OMP_PROC_BIND") == name);
    CHECK_THAT(format_plan_table(dgx(), req, plan),
               Catch::Contains(std::string("OpenMP threads pinned: OMP_PROC_BIND=") + name));
    Request narrow = request("0-3", 4, "0-5");
    narrow.omp_bind = bind;
    CHECK(env(make_plan(dgx(), narrow).ranks[1], "OMP_PLACES") == "{1},{2}");
  }
}

TEST_CASE("omp-bind values: none, close and spread; anything else names the option, the value and the choices") {
  CHECK(parse_omp_bind("none", "--omp-bind") == OmpBind::none);
  CHECK(parse_omp_bind("close", "--omp-bind") == OmpBind::close);
  CHECK(parse_omp_bind("spread", "--omp-bind") == OmpBind::spread);
  CHECK(omp_bind_name(OmpBind::spread) == "spread");
  for (const char* bad : {"", "true", "Close", "close ", "master", "primary", "close,spread", "none\n"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH(parse_omp_bind(bad, "--omp-bind"),
                      Catch::Contains(std::string("--omp-bind: unknown value '") + bad + "'") &&
                          Catch::Contains("none, close and spread"));
  }
}

TEST_CASE("affinity planner: the task's own OMP_* settings win; placement variables are the plan's") {
  Request req = request("0-7", 8);
  req.omp_bind = OmpBind::close;
  const RankPlan rp = make_plan(dgx(), req).ranks[1];
  const std::map<std::string, std::string> user{{"OMP_PROC_BIND", "false"}, {"OMP_NUM_THREADS", "7"},
                                                {"OMP_PLACES", "cores"}, {"CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"},
                                                {"NCCL_IB_HCA", "mlx5_9"}};
  const auto lookup = [&](const std::string& key) -> std::optional<std::string> {
    const auto it = user.find(key);
    return it == user.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  const TaskEnv applied = task_env(rp, lookup);
  std::map<std::string, std::string> set(applied.set.begin(), applied.set.end());
  std::map<std::string, std::string> kept(applied.kept.begin(), applied.kept.end());
  CHECK(set.count("OMP_PROC_BIND") == 0);
  CHECK(set.count("OMP_NUM_THREADS") == 0);
  CHECK(set.count("OMP_PLACES") == 0);
  CHECK(kept == std::map<std::string, std::string>{{"OMP_NUM_THREADS", "7"}, {"OMP_PLACES", "cores"},
                                                   {"OMP_PROC_BIND", "false"}});
  CHECK(set.at("CUDA_VISIBLE_DEVICES") == "1,0,2,3,4,5,6,7");  // Slurm's own value is replaced
  CHECK(set.at("NCCL_IB_HCA") == "=mlx5_0:1");
  // One OMP_* set by the user leaves the others to the plan.
  const auto only_bind = [](const std::string& key) -> std::optional<std::string> {
    return key == "OMP_PROC_BIND" ? std::optional<std::string>("false") : std::nullopt;
  };
  const TaskEnv partly = task_env(rp, only_bind);
  std::map<std::string, std::string> partly_set(partly.set.begin(), partly.set.end());
  CHECK(partly_set.count("OMP_PROC_BIND") == 0);
  CHECK(partly_set.at("OMP_PLACES") == "{4,36},{5,37},{6,38},{7,39}");
  CHECK(partly_set.at("OMP_NUM_THREADS") == "4");
  // An empty value is still the user's choice (OMP_PROC_BIND= disables nothing but is set).
  const auto empty = [](const std::string& key) -> std::optional<std::string> {
    return key == "OMP_NUM_THREADS" ? std::optional<std::string>("") : std::nullopt;
  };
  CHECK(task_env(rp, empty).kept.size() == 1);
  // Nothing set by the task: the whole plan, in the plan's order.
  const TaskEnv fresh = task_env(rp, [](const std::string&) { return std::optional<std::string>(); });
  auto planned = rp.env;
  planned.emplace_back(kPlanRecord, "OMP_NUM_THREADS=4;OMP_PLACES={4,36},{5,37},{6,38},{7,39};OMP_PROC_BIND=close");
  CHECK(fresh.set == planned);  // and the record of what it set, last
  CHECK(fresh.kept.empty());
  CHECK(fresh.unset.empty());
  // The record names only what the plan set, not what the task kept.
  CHECK(partly.set.back() == std::pair<std::string, std::string>(
                                 kPlanRecord, "OMP_NUM_THREADS=4;OMP_PLACES={4,36},{5,37},{6,38},{7,39}"));
}

// srun inside a bound task (`srun --pty bash`, then srun in it) inherits the outer plan's
// OMP_*: those are not the user's. The attacks: the outer plan pinned and this one does
// not; the user changed one value since; a record that names other variables or is
// malformed; a record that a user forged to match values of their own (harmless: the
// plan's values replace them, no more).
TEST_CASE("affinity planner: OMP_* inherited from an enclosing step's plan are replaced, the user's kept") {
  Request outer_req = request("0-7", 1);  // one task with 16 cores, pinned
  outer_req.omp_bind = OmpBind::close;
  const RankPlan outer = make_plan(dgx(), outer_req).ranks[0];
  std::map<std::string, std::string> task_vars;  // what the inner step's task inherits
  for (const auto& [key, value] : task_env(outer, [](const std::string&) { return std::optional<std::string>(); }).set)
    task_vars[key] = value;
  REQUIRE(task_vars.at("OMP_NUM_THREADS") == "16");
  REQUIRE(task_vars.count("OMP_PLACES") == 1);
  const auto lookup = [&](const std::string& key) -> std::optional<std::string> {
    auto it = task_vars.find(key);
    return it == task_vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  Request inner_req = request("0-7", 4);  // srun -n4 inside it, --omp-bind none
  const RankPlan inner = make_plan(dgx(), inner_req).ranks[1];
  TaskEnv env = task_env(inner, lookup);
  std::map<std::string, std::string> set(env.set.begin(), env.set.end());
  CHECK(set.at("OMP_NUM_THREADS") == "8");  // its own cores, not the outer task's 16
  CHECK(env.kept.empty());
  CHECK(env.unset == std::vector<std::string>{"OMP_PLACES", "OMP_PROC_BIND"});
  CHECK(set.at(kPlanRecord) == "OMP_NUM_THREADS=8");
  // The user changed OMP_NUM_THREADS and OMP_PROC_BIND in the shell: theirs now.
  task_vars["OMP_NUM_THREADS"] = "3";
  task_vars["OMP_PROC_BIND"] = "spread";
  env = task_env(inner, lookup);
  CHECK(env.kept == std::vector<std::pair<std::string, std::string>>{{"OMP_NUM_THREADS", "3"}});
  CHECK(env.unset == std::vector<std::string>{"OMP_PLACES"});  // OMP_PROC_BIND=spread stays
  CHECK(std::none_of(env.set.begin(), env.set.end(), [](const auto& kv) { return kv.first == "OMP_NUM_THREADS"; }));
  // A record may only speak of OMP_* variables, and a malformed one says nothing.
  for (const char* record : {"LD_PRELOAD=/tmp/x.so;PATH=/tmp", "OMP_NUM_THREADS", ";;=;OMP_PLACES", ""}) {
    CAPTURE(record);
    std::map<std::string, std::string> vars{{kPlanRecord, record}, {"LD_PRELOAD", "/tmp/x.so"}, {"PATH", "/tmp"},
                                            {"OMP_NUM_THREADS", "5"}, {"OMP_PLACES", "cores"}};
    TaskEnv e = task_env(inner, [&](const std::string& key) -> std::optional<std::string> {
      auto it = vars.find(key);
      return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
    });
    CHECK(e.unset.empty());
    CHECK(e.kept == std::vector<std::pair<std::string, std::string>>{{"OMP_NUM_THREADS", "5"}});
  }
}
