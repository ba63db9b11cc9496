#include "launcher/run/elastic.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "common/error.hpp"
#include "common/hostlist.hpp"

namespace saker::run {
namespace {

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// A positive int in `text`, or -1.
int positive(const std::string& text) {
  if (text.empty() || text.size() > 6 || text.find_first_not_of("0123456789") != std::string::npos) return -1;
  const long v = std::strtol(text.c_str(), nullptr, 10);
  return v > 0 ? static_cast<int>(v) : -1;
}

}  // namespace

NodeRange parse_node_range(const std::string& text) {
  const std::size_t colon = text.find(':');
  const std::string lo = text.substr(0, colon), hi = colon == std::string::npos ? lo : text.substr(colon + 1);
  const int min = positive(lo), max = positive(hi);
  if (min < 0 || max < 0) {
    throw Error(explain("--nodes " + text, "it is not MIN:MAX with two positive whole numbers (torchrun's --nnodes form)",
                        "pass e.g. --nodes 2:4 (go on with 2 to 4 nodes) or --nodes 4"));
  }
  if (min > max) {
    throw Error(explain("--nodes " + text, "MIN " + lo + " is larger than MAX " + hi,
                        "write the smaller bound first, e.g. --nodes " + hi + ":" + lo));
  }
  return {min, max};
}

NodeLossPolicy parse_node_loss(const std::string& text) {
  if (text == "shrink") return NodeLossPolicy::shrink;
  if (text == "requeue") return NodeLossPolicy::requeue;
  if (text == "wait") return NodeLossPolicy::wait;
  throw Error(explain("--on-node-loss=" + text, "it is not shrink, requeue or wait", "pass one of the three"));
}

const char* node_loss_name(NodeLossPolicy policy) {
  switch (policy) {
    case NodeLossPolicy::shrink: return "shrink";
    case NodeLossPolicy::requeue: return "requeue";
    case NodeLossPolicy::wait: return "wait";
  }
  return "?";
}

NodePlan plan_node_loss(NodeLossPolicy policy, const NodeRange& range, const Placement& current,
                        const std::vector<std::string>& lost, bool can_requeue) {
  NodePlan plan;
  if (lost.empty()) return plan;
  const std::string names = hostlist::compress(lost);
  Placement survivors{{}, current.tasks_per_node};
  for (const auto& n : current.nodes)
    if (!contains(lost, n)) survivors.nodes.push_back(n);
  const int left = static_cast<int>(survivors.nodes.size());
  // Neither shrinking nor requeueing: wait for the nodes (before issue 32, outside a
  // requeueable job).
  auto fallback = [&](const std::string& why) {
    plan.action = can_requeue ? NodeAction::requeue : NodeAction::wait;
    plan.reason = why + (can_requeue ? ": requeueing the job off " + names
                                     : ": waiting for " + names + " to answer again (the job cannot be requeued)");
    return plan;
  };
  if (policy == NodeLossPolicy::wait) {
    plan.action = NodeAction::wait;
    plan.reason = "node(s) " + names + " lost (--on-node-loss=wait): waiting for them to answer again";
    return plan;
  }
  if (policy == NodeLossPolicy::requeue) return fallback("node(s) " + names + " lost (--on-node-loss=requeue)");
  if (left < range.min) {
    return fallback("node(s) " + names + " lost: " + std::to_string(left) + " node(s) left, below --nodes MIN " +
                    std::to_string(range.min) + (range.min == range.max ? " (the allocation's size unless --nodes says less)" : ""));
  }
  if (current.tasks_per_node < 1) {
    return fallback("node(s) " + names + " lost: the job's tasks are not spread evenly over its nodes, so saker-run "
                    "cannot say how many ranks the survivors run");
  }
  plan.action = NodeAction::shrink;
  plan.placement = survivors;
  plan.reason = "node(s) " + names + " lost: going on at once with " + std::to_string(left) + " of " +
                std::to_string(current.nodes.size()) + " nodes (" + std::to_string(survivors.ntasks()) +
                " ranks) on " + hostlist::compress(survivors.nodes) + ", within --nodes " + std::to_string(range.min) +
                ":" + std::to_string(range.max);
  return plan;
}

std::vector<std::string> grow_candidates(const Placement& current, const std::vector<std::string>& allocation,
                                         const std::vector<std::string>& returned, const NodeRange& range) {
  std::vector<std::string> out;
  int room = range.max - static_cast<int>(current.nodes.size());
  for (const auto& n : allocation) {
    if (room <= 0) break;
    if (contains(returned, n) && !contains(current.nodes, n)) {
      out.push_back(n);
      --room;
    }
  }
  return out;
}

Placement grown(const Placement& current, const std::vector<std::string>& added,
                const std::vector<std::string>& allocation) {
  Placement out{{}, current.tasks_per_node};
  for (const auto& n : allocation)
    if (contains(current.nodes, n) || contains(added, n)) out.nodes.push_back(n);
  // Nodes of the attempt that the allocation no longer lists stay (slurmctld's view can lag).
  for (const auto& n : current.nodes)
    if (!contains(out.nodes, n)) out.nodes.push_back(n);
  return out;
}

std::vector<std::string> placement_args(const Placement& placement, bool overlap) {
  std::vector<std::string> args = {"-N", std::to_string(placement.nodes.size()), "-n",
                                   std::to_string(placement.ntasks()), "--nodelist=" + hostlist::compress(placement.nodes)};
  if (overlap) args.emplace_back("--overlap");
  return args;
}

int even_tasks_per_node(int ntasks, int nodes) {
  if (ntasks < 1 || nodes < 1 || ntasks % nodes != 0) return 0;
  return ntasks / nodes;
}

}  // namespace saker::run
