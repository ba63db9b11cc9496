#include "launcher/run/rank_env.hpp"

#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <cstring>

#include "common/error.hpp"
#include "common/random.hpp"

extern char** environ;

namespace saker::run {
namespace {

int to_int(const std::string& text, const std::string& what) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || value < 0) {
    throw Error(explain(what + " is '" + text + "'", "it is not a non-negative integer",
                        "start the program through srun or saker-run, which set it"));
  }
  return value;
}

const std::string& need(const Env& env, const std::string& name) {
  auto it = env.find(name);
  if (it == env.end()) {
    throw Error(explain("environment variable " + name + " is not set",
                        "this process was not started as a task of a Slurm step",
                        "launch it with srun (saker-run does) or use saker-run --local"));
  }
  return it->second;
}

const std::string* find_any(const Env& env, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    auto it = env.find(n);
    if (it != env.end()) return &it->second;
  }
  return nullptr;
}

}  // namespace

Env current_environment() {
  Env env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr) continue;
    env.emplace(std::string(*e, static_cast<std::size_t>(eq - *e)), std::string(eq + 1));
  }
  return env;
}

std::vector<int> parse_tasks_per_node(const std::string& spec) {
  std::vector<int> counts;
  const auto bad = [&](const std::string& why) {
    return Error(explain("tasks-per-node list '" + spec + "'", why,
                         "expected Slurm's syntax, e.g. '2(x3),1'"));
  };
  if (spec.empty()) throw bad("it is empty");
  std::size_t pos = 0;
  while (pos <= spec.size()) {
    std::size_t comma = spec.find(',', pos);
    if (comma == std::string::npos) comma = spec.size();
    const std::string item = spec.substr(pos, comma - pos);
    if (item.empty()) throw bad("it has an empty element");
    int count = 0;
    int repeat = 1;
    const std::size_t paren = item.find('(');
    if (paren == std::string::npos) {
      count = to_int(item, "task count");
    } else {
      if (item.size() < paren + 4 || item.compare(paren, 2, "(x") != 0 || item.back() != ')') {
        throw bad("element '" + item + "' is not N or N(xM)");
      }
      count = to_int(item.substr(0, paren), "task count");
      repeat = to_int(item.substr(paren + 2, item.size() - paren - 3), "repeat count");
    }
    if (count <= 0 || repeat <= 0) throw bad("element '" + item + "' has a zero count");
    counts.insert(counts.end(), static_cast<std::size_t>(repeat), count);
    pos = comma + 1;
  }
  return counts;
}

Env rank_env_from_slurm(const Env& task_env) {
  const int rank = to_int(need(task_env, "SLURM_PROCID"), "SLURM_PROCID");
  const std::string* world_text = find_any(task_env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"});
  if (world_text == nullptr) need(task_env, "SLURM_STEP_NUM_TASKS");  // throws, naming it
  const int world = to_int(*world_text, "SLURM_STEP_NUM_TASKS");
  const int local_rank = to_int(need(task_env, "SLURM_LOCALID"), "SLURM_LOCALID");
  const int node = to_int(need(task_env, "SLURM_NODEID"), "SLURM_NODEID");
  const std::string* per_node_text = find_any(task_env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
  if (per_node_text == nullptr) need(task_env, "SLURM_STEP_TASKS_PER_NODE");
  const std::vector<int> per_node = parse_tasks_per_node(*per_node_text);
  if (node >= static_cast<int>(per_node.size())) {
    throw Error(explain("SLURM_NODEID=" + std::to_string(node) + " is past the tasks-per-node list '" +
                            *per_node_text + "'",
                        "Slurm's variables disagree", "report this with the output of `env | grep SLURM`"));
  }
  if (rank >= world || local_rank >= per_node[node]) {
    throw Error(explain("rank " + std::to_string(rank) + " (local " + std::to_string(local_rank) +
                            ") is outside the step of " + std::to_string(world) + " tasks",
                        "Slurm's variables disagree", "report this with the output of `env | grep SLURM`"));
  }
  Env out = local_rank_env(rank, world);
  out["LOCAL_RANK"] = std::to_string(local_rank);
  out["SAKER_LOCAL_RANK"] = out["LOCAL_RANK"];
  out["LOCAL_WORLD_SIZE"] = std::to_string(per_node[node]);
  out["GROUP_RANK"] = std::to_string(node);
  out["GROUP_WORLD_SIZE"] = std::to_string(per_node.size());
  return out;
}

Env local_rank_env(int rank, int world) {
  SAKER_ASSERT(rank >= 0 && rank < world, "rank outside the world");
  Env out;
  out["RANK"] = std::to_string(rank);
  out["WORLD_SIZE"] = std::to_string(world);
  out["LOCAL_RANK"] = out["RANK"];
  out["LOCAL_WORLD_SIZE"] = out["WORLD_SIZE"];
  out["GROUP_RANK"] = "0";
  out["GROUP_WORLD_SIZE"] = "1";
  // torchrun runs one role, "default", spanning every rank.
  out["ROLE_NAME"] = "default";
  out["ROLE_RANK"] = out["RANK"];
  out["ROLE_WORLD_SIZE"] = out["WORLD_SIZE"];
  out["SAKER_RANK"] = out["RANK"];
  out["SAKER_WORLD_SIZE"] = out["WORLD_SIZE"];
  out["SAKER_LOCAL_RANK"] = out["LOCAL_RANK"];
  return out;
}

Env elastic_env(int restart_count, int max_restarts, const std::string& run_id) {
  Env out;
  out["TORCHELASTIC_RESTART_COUNT"] = std::to_string(restart_count);
  out["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(max_restarts);
  out["TORCHELASTIC_RUN_ID"] = run_id;
  // As torchrun: rank 0 hosts torch's TCPStore (no agent store here), and NCCL reports a
  // failed peer instead of hanging, unless the user chose otherwise.
  out["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  const char* nccl_async = std::getenv("NCCL_ASYNC_ERROR_HANDLING");
  out["NCCL_ASYNC_ERROR_HANDLING"] = nccl_async != nullptr && *nccl_async != '\0' ? nccl_async : "1";
  return out;
}

Env job_key_env() {
  std::string key = random::job_key_hex();
  if (key.empty()) {
    throw Error(explain("cannot make this attempt's job key (SAKER_JOB_KEY)", std::strerror(errno),
                        "the kernel's random source (getrandom) failed; check the node"));
  }
  Env out;
  out[kJobKeyEnv] = std::move(key);
  return out;
}

Env transit_env(const std::string& option, const std::string& inherited) {
  const std::string& value = option.empty() ? inherited : option;
  if (value.empty()) return {};
  if (value != "auth" && value != "encrypt" && value != "off") {
    const std::string where = option.empty() ? std::string(kTransitEnv) + " in the environment" : "--transit";
    throw Error(explain(where + " is '" + value + "'", "it must be auth, encrypt or off",
                        "pass --transit=auth (the default) or --transit=encrypt"));
  }
  Env out;
  out[kTransitEnv] = value;
  return out;
}

Env rendezvous_env(const std::string& master_addr, int master_port) {
  Env out;
  out["MASTER_ADDR"] = master_addr;
  out["MASTER_PORT"] = std::to_string(master_port);
  return out;
}

}  // namespace saker::run
