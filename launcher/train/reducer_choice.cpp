#include "launcher/train/reducer_choice.hpp"

#include <unistd.h>

#include <cstring>
#include <vector>

#include "config.h"
#include "common/error.hpp"
#include "launcher/train/comm_reducer.hpp"
#include "saker/comm.hpp"
#ifdef SAKER_HAVE_NCCL
#include "launcher/train/nccl_reducer.hpp"
#endif

namespace saker::train {
namespace {

// A GpuProbe as fixed-size bytes for the allgather (the reason is cut to fit).
struct WireProbe {
  char built;
  char usable;
  char why_not[254];
};

WireProbe to_wire(const GpuProbe& p) {
  WireProbe w{};
  w.built = p.built ? 1 : 0;
  w.usable = p.usable ? 1 : 0;
  std::strncpy(w.why_not, p.why_not.c_str(), sizeof w.why_not - 1);
  return w;
}

GpuProbe from_wire(const WireProbe& w) {
  return {w.built != 0, w.usable != 0, std::string(w.why_not, strnlen(w.why_not, sizeof w.why_not))};
}

comm::Options reducer_options() {
  comm::Options o;
  o.fusion = false;  // one synchronous allreduce per step; no background negotiation
  return o;
}

std::string this_host() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

}  // namespace

ReducerChoice reducer_over(std::unique_ptr<comm::Communicator> comm, Device wanted, const GpuProbe& mine) {
  const int world = comm->size();
  const WireProbe sent = to_wire(mine);
  std::vector<WireProbe> all(static_cast<std::size_t>(world));
  comm->allgather(&sent, all.data(), sizeof sent);
  std::vector<GpuProbe> probes;
  std::vector<std::string> hosts;
  for (int r = 0; r < world; ++r) {
    probes.push_back(from_wire(all[static_cast<std::size_t>(r)]));
    hosts.push_back(comm->host_of(r));
  }
  ReducerChoice choice;
  choice.decision = decide_device(wanted, probes, hosts);
#ifdef SAKER_HAVE_NCCL
  if (choice.decision.gpu) {
    auto nccl = std::make_unique<NcclReducer>(std::move(comm));
    // sum_logical() goes over the host communicator (nccl_reducer.hpp): say so.
    choice.line = "saker-train: NCCL set up on " + nccl->describe() + " (" + choice.decision.reason +
                  "); gradients are summed in saker's canonical order over the host ring, the same bits as without a GPU";
    choice.reducer = std::move(nccl);
    return choice;
  }
#endif
  SAKER_ASSERT(!choice.decision.gpu, "decide_device() picked the GPU in a build without NCCL");
  choice.line = "saker-train: gradients allreduced over saker's host ring (" + choice.decision.reason + ")";
  choice.reducer = std::make_unique<CommReducer>(std::move(comm));
  return choice;
}

ReducerChoice make_reducer(Device wanted) {
  const GpuProbe mine = probe_gpu_for(wanted);
  if (launcher_world_size() > 1)
    return reducer_over(comm::Communicator::from_environment(reducer_options()), wanted, mine);
  ReducerChoice solo;
  solo.decision = decide_device(wanted, {mine}, {this_host()});
  if (solo.decision.gpu) {
    const std::string host = this_host();
    return reducer_over(comm::Communicator::create(comm::make_memory_store(), comm::Placement{0, 1, host, host, 0},
                                                   comm::options_from_environment(reducer_options())),
                        wanted, mine);
  }
  solo.line = "saker-train: one rank: gradients stay in host memory, nothing to allreduce (" + solo.decision.reason + ")";
  solo.reducer = std::make_unique<SoloReducer>();
  return solo;
}

}  // namespace saker::train
