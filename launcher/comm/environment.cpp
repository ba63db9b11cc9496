// Communicator::from_environment: PMI2, then Slurm's step (TCP store on the first
// node), then an explicit SAKER_STORE / MASTER_ADDR. See <saker/comm.hpp>.
#include <cstdlib>
#include <cstring>

#include "common/error.hpp"
#include "common/hostlist.hpp"
#include "common/log.hpp"
#include "launcher/comm/auth.hpp"
#include "launcher/comm/impl.hpp"
#include "launcher/comm/net.hpp"
#include "launcher/comm/slurm_store_port.hpp"

namespace saker::comm {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

const char* env_any(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (const char* v = env(n)) return v;
  return nullptr;
}

long env_number(const char* name, const char* v) {
  char* end = nullptr;
  errno = 0;
  long x = std::strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0')
    throw Error(explain(std::string(name) + "='" + v + "' is not a number", "it must be a whole number",
                        "fix the variable (the launcher usually sets it)"));
  return x;
}

long need_number(std::initializer_list<const char*> names, const char* why) {
  for (const char* n : names)
    if (const char* v = env(n)) return env_number(n, v);
  std::string list;
  for (const char* n : names) list += (list.empty() ? "" : " or ") + std::string(n);
  throw Error(explain(std::string("cannot bootstrap the communicator: ") + list + " is not set", why,
                      "start the program with srun --mpi=pmi2, srun, or saker-run (which sets SAKER_RANK, "
                      "SAKER_WORLD_SIZE and SAKER_STORE)"));
}

void fill_identity(Placement& p) {
  p.host = net::host_name();
  const char* node = env_any({"SAKER_NODE_ID", "SLURMD_NODENAME"});
  p.node = node ? node : p.host;
  if (const char* lr = env_any({"SAKER_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"})) p.local_rank = static_cast<int>(env_number("local rank", lr));
  // Under multiple-slurmd every "node" shares a host name; report the Slurm node.
  if (node && p.host != node) p.host = p.host + "/" + node;
}

std::pair<std::string, int> split_host_port(const std::string& s, const char* var) {
  auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size())
    throw Error(explain(std::string(var) + "='" + s + "' is not host:port", "the store address needs both parts",
                        "set it like node1:29500"));
  return {s.substr(0, colon), static_cast<int>(env_number(var, s.c_str() + colon + 1))};
}

// SAKER_COMM_TRANSIT_REQUIRED=encrypt: spank_saker.so sets it when the site policy gives
// one of the job's datasets transit: encrypt (saker-policy.yaml(5)). A weaker mode is an
// error, never a silent downgrade nor a silent upgrade of what the program asked for.
void require_transit(Options& o) {
  const char* v = env("SAKER_COMM_TRANSIT_REQUIRED");
  if (v == nullptr) return;
  if (std::strcmp(v, "encrypt") != 0)
    throw Error(explain(std::string("SAKER_COMM_TRANSIT_REQUIRED='") + v + "' is unknown",
                        "spank_saker.so sets it to encrypt, the only requirement a policy can make",
                        "unset it, or set it to encrypt"));
  if (!env("SAKER_COMM_TRANSIT")) o.transit = Transit::encrypt;
  if (o.transit != Transit::encrypt)
    throw Error(explain(std::string("this job's traffic must be encrypted, but SAKER_COMM_TRANSIT=") + name_of(o.transit),
                        "the site policy gives one of the job's datasets transit: encrypt (SAKER_COMM_TRANSIT_REQUIRED=encrypt, "
                        "set by spank_saker.so)",
                        "run with saker-run --transit=encrypt or SAKER_COMM_TRANSIT=encrypt, or leave the mode unset"));
}

// Rank 0 makes the key and publishes it in Slurm's PMI2 KVS, which only the step's own
// tasks reach (never the TCP store, which anyone who finds its port can read).
std::string key_over_pmi2(Store& pmi2, int rank, std::chrono::milliseconds timeout) {
  const std::string name = "saker-job-key";
  if (rank == 0) pmi2.set(name, auth::JobKey::generate().hex());
  pmi2.sync(timeout);
  return auth::JobKey::parse_hex(pmi2.get(name, timeout), "the job key in the PMI2 KVS").raw();
}

}  // namespace

Options options_from_environment(Options o) {
  if (const char* v = env("SAKER_COMM_TIMEOUT")) o.timeout = std::chrono::seconds(env_number("SAKER_COMM_TIMEOUT", v));
  if (const char* v = env("SAKER_COMM_TRANSPORT")) {
    std::string t = v;
    if (t == "auto") o.transport = Transport::automatic;
    else if (t == "ring" || t == "tcp") o.transport = Transport::ring;
    else if (t == "shm") o.transport = Transport::shm;
    else if (t == "hierarchical") o.transport = Transport::hierarchical;
    else throw Error(explain("SAKER_COMM_TRANSPORT='" + t + "' is unknown", "known: auto, ring, shm, hierarchical",
                             "pick one of those"));
  }
  if (const char* v = env("SAKER_COMM_TRANSIT")) {
    std::string t = v;
    if (t == "auth") o.transit = Transit::auth;
    else if (t == "encrypt") o.transit = Transit::encrypt;
    else if (t == "off") o.transit = Transit::off;
    else throw Error(explain("SAKER_COMM_TRANSIT='" + t + "' is unknown", "known: auth (the default), encrypt, off (benchmarks only)",
                             "pick one of those, or leave it unset for auth"));
  }
  require_transit(o);
  if (const char* v = env("SAKER_COMM_CHUNK_BYTES")) o.chunk_bytes = static_cast<std::size_t>(env_number("SAKER_COMM_CHUNK_BYTES", v));
  if (const char* v = env("SAKER_FUSION_BYTES")) o.fusion_bytes = static_cast<std::size_t>(env_number("SAKER_FUSION_BYTES", v));
  if (const char* v = env("SAKER_FUSION_CYCLE_MS")) o.fusion_cycle = std::chrono::milliseconds(env_number("SAKER_FUSION_CYCLE_MS", v));
  if (const char* v = env("SAKER_STALL_WARNING_S")) o.stall_warning = std::chrono::seconds(env_number("SAKER_STALL_WARNING_S", v));
  if (const char* v = env("SAKER_STALL_ABORT_S")) o.stall_abort = std::chrono::seconds(env_number("SAKER_STALL_ABORT_S", v));
  if (const char* v = env("SAKER_TIMELINE")) o.timeline_path = v;
  if (o.job_key.empty() && o.transit != Transit::off)
    if (auto key = auth::key_from_environment()) o.job_key = key->raw();
  return o;
}

std::unique_ptr<Communicator> Communicator::from_environment(const Options& given) {
  Options options = given.ignore_environment ? given : options_from_environment(given);
  Placement where;
  fill_identity(where);
  // 1. PMI2: only when srun --mpi=pmi2 started us (PMI_FD); PMI2_Init "succeeds"
  //    without it and every later call fails.
  if (env("PMI_FD")) {
    auto store = make_pmi2_store(&where.rank, &where.size);
    log::debug("comm: rendezvous through PMI2");
    if (options.job_key.empty() && options.transit != Transit::off && where.size > 1)
      options.job_key = key_over_pmi2(*store, where.rank, options.timeout);
    return create(store, where, options);
  }
  // 2. Slurm step without PMI2: TCP store on the step's first node.
  const char* nodelist = env_any({"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"});
  if (nodelist && env("SLURM_JOB_ID") && env("SLURM_PROCID") && !env("SAKER_STORE")) {
    where.rank = static_cast<int>(need_number({"SLURM_PROCID"}, "Slurm sets it for each task"));
    where.size = static_cast<int>(need_number({"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}, "Slurm sets it for each step"));
    long job = need_number({"SLURM_JOB_ID"}, "Slurm sets it");
    long step = env("SLURM_STEP_ID") ? env_number("SLURM_STEP_ID", env("SLURM_STEP_ID")) : 0;
    int port = env("SAKER_STORE_PORT") ? static_cast<int>(env_number("SAKER_STORE_PORT", env("SAKER_STORE_PORT")))
                                       : slurm_store_port(job, step);
    std::string first = hostlist::expand(nodelist).at(0);
    std::unique_ptr<TcpStoreServer> server;
    const char* node_id = env("SLURM_NODEID");
    const char* local_id = env("SLURM_LOCALID");
    bool serves = node_id && local_id ? (std::strcmp(node_id, "0") == 0 && std::strcmp(local_id, "0") == 0) : where.rank == 0;
    if (serves) server = std::make_unique<TcpStoreServer>(port, options);
    // Multiple-slurmd "nodes" share one machine; their names resolve only through
    // slurm.conf, so SAKER_STORE_HOST may name the address explicitly.
    std::string host = env("SAKER_STORE_HOST") ? env("SAKER_STORE_HOST") : first;
    log::debug("comm: rendezvous through the TCP store at " + host + ":" + std::to_string(port));
    auto c = create(make_tcp_store(host, port, options), where, options);
    c->impl_->store_server = std::move(server);
    return c;
  }
  // 3. Explicit store.
  std::string addr;
  if (const char* s = env("SAKER_STORE")) addr = s;
  else if (env("MASTER_ADDR") && env("MASTER_PORT")) addr = std::string(env("MASTER_ADDR")) + ":" + env("MASTER_PORT");
  else
    throw Error(explain("cannot bootstrap the communicator: no PMI2 (PMI_FD), no Slurm step and no SAKER_STORE",
                        "the program was started outside srun and outside saker-run",
                        "run it with srun --mpi=pmi2, srun, saker-run --local -n N, or set SAKER_STORE=host:port "
                        "SAKER_RANK and SAKER_WORLD_SIZE"));
  auto [host, port] = split_host_port(addr, "SAKER_STORE");
  where.rank = static_cast<int>(need_number({"SAKER_RANK", "RANK"}, "the explicit store needs each rank's number"));
  where.size = static_cast<int>(need_number({"SAKER_WORLD_SIZE", "WORLD_SIZE"}, "the explicit store needs the world size"));
  std::unique_ptr<TcpStoreServer> server;
  const char* external = env("SAKER_STORE_EXTERNAL");
  if (where.rank == 0 && !(external && std::strcmp(external, "1") == 0)) server = std::make_unique<TcpStoreServer>(port, options);
  auto c = create(make_tcp_store(host, port, options), where, options);
  c->impl_->store_server = std::move(server);
  return c;
}

}  // namespace saker::comm
