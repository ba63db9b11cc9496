#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "common/reserved_port.hpp"
#include "launcher/run/node_probe.hpp"
#include "launcher/run/rank_env.hpp"

using namespace saker::run;

TEST_CASE("Slurm's tasks-per-node syntax expands to one count per node") {
  CHECK(parse_tasks_per_node("4") == std::vector<int>{4});
  CHECK(parse_tasks_per_node("2(x3),1") == std::vector<int>{2, 2, 2, 1});
  CHECK(parse_tasks_per_node("1,3(x2)") == std::vector<int>{1, 3, 3});
  CHECK_THROWS_AS(parse_tasks_per_node(""), saker::Error);
  CHECK_THROWS_AS(parse_tasks_per_node("2(3)"), saker::Error);
  CHECK_THROWS_AS(parse_tasks_per_node("2,,1"), saker::Error);
  CHECK_THROWS_AS(parse_tasks_per_node("0"), saker::Error);
  CHECK_THROWS_AS(parse_tasks_per_node("x"), saker::Error);
}

TEST_CASE("an srun task gets torch.distributed's and Saker's rank variables") {
  const Env slurm = {{"SLURM_PROCID", "3"}, {"SLURM_STEP_NUM_TASKS", "4"}, {"SLURM_LOCALID", "1"},
                     {"SLURM_NODEID", "1"}, {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}};
  const Env e = rank_env_from_slurm(slurm);
  CHECK(e.at("RANK") == "3");
  CHECK(e.at("WORLD_SIZE") == "4");
  CHECK(e.at("LOCAL_RANK") == "1");
  CHECK(e.at("LOCAL_WORLD_SIZE") == "2");
  CHECK(e.at("GROUP_RANK") == "1");
  CHECK(e.at("SAKER_RANK") == "3");
  CHECK(e.at("SAKER_WORLD_SIZE") == "4");
  // torchrun's names: one group (agent) per node, one role spanning every rank.
  CHECK(e.at("GROUP_WORLD_SIZE") == "2");
  CHECK(e.at("ROLE_RANK") == "3");
  CHECK(e.at("ROLE_WORLD_SIZE") == "4");
  CHECK(e.at("ROLE_NAME") == "default");
}

TEST_CASE("uneven nodes give each node its own LOCAL_WORLD_SIZE") {
  Env slurm = {{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "3"}, {"SLURM_LOCALID", "0"},
               {"SLURM_NODEID", "1"}, {"SLURM_TASKS_PER_NODE", "2,1"}};
  CHECK(rank_env_from_slurm(slurm).at("LOCAL_WORLD_SIZE") == "1");
  slurm["SLURM_NODEID"] = "0";
  slurm["SLURM_PROCID"] = "1";
  slurm["SLURM_LOCALID"] = "1";
  CHECK(rank_env_from_slurm(slurm).at("LOCAL_WORLD_SIZE") == "2");
}

TEST_CASE("a process not started by srun is told so, by variable name") {
  try {
    rank_env_from_slurm({{"SLURM_NTASKS", "2"}});
    FAIL("no exception");
  } catch (const saker::Error& e) {
    CHECK(std::string(e.what()).find("SLURM_PROCID") != std::string::npos);
  }
  CHECK_THROWS_AS(rank_env_from_slurm({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"},
                                       {"SLURM_NODEID", "0"}, {"SLURM_TASKS_PER_NODE", "2"}}),
                  saker::Error);
}

TEST_CASE("local ranks and rendezvous variables") {
  const Env e = local_rank_env(1, 3);
  CHECK(e.at("RANK") == "1");
  CHECK(e.at("LOCAL_RANK") == "1");
  CHECK(e.at("WORLD_SIZE") == "3");
  CHECK(e.at("LOCAL_WORLD_SIZE") == "3");
  CHECK(e.at("GROUP_WORLD_SIZE") == "1");
  CHECK(e.at("ROLE_RANK") == "1");
  CHECK(e.at("ROLE_WORLD_SIZE") == "3");
  const Env elastic = elastic_env(2, 5, "1234");
  CHECK(elastic.at("TORCHELASTIC_RESTART_COUNT") == "2");
  CHECK(elastic.at("TORCHELASTIC_MAX_RESTARTS") == "5");
  CHECK(elastic.at("TORCHELASTIC_RUN_ID") == "1234");
  CHECK(elastic.at("TORCHELASTIC_USE_AGENT_STORE") == "False");  // rank 0 hosts torch's store, as env:// expects
  ::unsetenv("NCCL_ASYNC_ERROR_HANDLING");
  CHECK(elastic_env(0, 0, "x").at("NCCL_ASYNC_ERROR_HANDLING") == "1");
  ::setenv("NCCL_ASYNC_ERROR_HANDLING", "0", 1);  // the user's choice stays
  CHECK(elastic_env(0, 0, "x").at("NCCL_ASYNC_ERROR_HANDLING") == "0");
  ::unsetenv("NCCL_ASYNC_ERROR_HANDLING");
  const Env r = rendezvous_env("10.0.0.1", 29500);
  CHECK(r.at("MASTER_ADDR") == "10.0.0.1");
  CHECK(r.at("MASTER_PORT") == "29500");
}

TEST_CASE("a closed TCP port is unreachable, a listening one reachable") {
  const saker::ReservedPort held;  // bound, never listening, and no one else's
  CHECK_FALSE(saker::run::tcp_reachable("127.0.0.1", held.port(), 500));
}

TEST_CASE("the job key is 64 lower-case hex digits, new on every call") {
  const std::string a = job_key_env().at(kJobKeyEnv);
  const std::string b = job_key_env().at(kJobKeyEnv);
  CHECK(a.size() == 64);
  CHECK(a.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(a != b);
  CHECK(std::string(kJobKeyEnv) == "SAKER_JOB_KEY");
}

TEST_CASE("--transit wins over SAKER_COMM_TRANSIT, which is the default; with neither nothing is exported") {
  CHECK(transit_env("encrypt", "auth").at(kTransitEnv) == "encrypt");
  CHECK(transit_env("", "encrypt").at(kTransitEnv) == "encrypt");
  CHECK(transit_env("off", "").at(kTransitEnv) == "off");
  CHECK(transit_env("", "").empty());
  try {
    transit_env("", "plain");
    FAIL("no exception");
  } catch (const saker::Error& e) {
    CHECK(std::string(e.what()).find("SAKER_COMM_TRANSIT in the environment is 'plain'") != std::string::npos);
  }
  CHECK_THROWS_AS(transit_env("tls", ""), saker::Error);
}
