// saker-run's elastic policy inside one Slurm allocation (issue 32): how many nodes a run
// may use (--nodes MIN:MAX), what a lost node leads to (--on-node-loss), and where the next
// attempt runs. Pure functions over node names, so every branch is unit-tested without Slurm;
// launcher.cpp and allocation.cpp do what they decide.
#pragma once

#include <string>
#include <vector>

namespace saker::run {

// --nodes MIN:MAX, torchrun's --nnodes form ("2:4", or "4" for 4:4). 0 = not given: both
// bounds are then the allocation's node count, so a lost node is not shrunk around.
struct NodeRange {
  int min = 0;
  int max = 0;
  bool given() const { return min > 0; }
};

// Parses "MIN:MAX" or "N". Throws saker::Error naming the text, why it is refused and the
// fix when it is not two positive integers with MIN <= MAX.
NodeRange parse_node_range(const std::string& text);

// --on-node-loss: what a lost node leads to.
enum class NodeLossPolicy {
  shrink,   // go on at once on the surviving nodes of the allocation (requeue below MIN)
  requeue,  // requeue the job off the lost node (the behaviour before issue 32)
  wait,     // wait for the node to answer again, then restart in place
};

// Parses shrink|requeue|wait; throws saker::Error naming the value.
NodeLossPolicy parse_node_loss(const std::string& text);
const char* node_loss_name(NodeLossPolicy policy);

// The nodes a job may run on and the nodes its current attempt runs on.
struct Placement {
  std::vector<std::string> nodes;  // the attempt's nodes, in allocation order
  int tasks_per_node = 1;
  int ntasks() const { return static_cast<int>(nodes.size()) * tasks_per_node; }
};

// What saker-run does about lost nodes after an attempt ended.
enum class NodeAction {
  none,     // no node is lost
  shrink,   // go on at once on `placement` (the survivors)
  requeue,  // requeue the job (below MIN, --on-node-loss=requeue, or shrinking is not possible)
  wait,     // wait for the lost nodes to answer, then restart in place
};

struct NodePlan {
  NodeAction action = NodeAction::none;
  Placement placement;  // for shrink: where the next attempt runs
  std::string reason;   // one line, logged verbatim
};

// Decides what a loss of `lost` (nodes of `current`) leads to, under `policy` and `range`
// (range already resolved: both bounds set). `can_requeue`: inside a requeueable job.
NodePlan plan_node_loss(NodeLossPolicy policy, const NodeRange& range, const Placement& current,
                        const std::vector<std::string>& lost, bool can_requeue);

// Which of `returned` (nodes that answer again) a shrunk run may grow onto: those in
// `allocation` (the job's nodes as slurmctld knows them now) not already in `current`,
// at most up to range.max nodes in all. Kept in allocation order.
std::vector<std::string> grow_candidates(const Placement& current, const std::vector<std::string>& allocation,
                                         const std::vector<std::string>& returned, const NodeRange& range);

// `current` plus `added`, in the order of `allocation` (the ranks keep their node order).
Placement grown(const Placement& current, const std::vector<std::string>& added,
                const std::vector<std::string>& allocation);

// The srun arguments that place an attempt: -N COUNT -n NTASKS --nodelist=HOSTLIST, and
// --overlap with `overlap`: after a lost node, slurmctld (22.05) may keep the killed step's
// record, waiting for the lost node's part forever and holding the survivors' CPUs, so a
// new step would wait "Requested nodes are busy"; --overlap lets it share them.
std::vector<std::string> placement_args(const Placement& placement, bool overlap = false);

// Tasks per node of a job with `ntasks` tasks on `nodes` nodes (SLURM_NTASKS,
// SLURM_JOB_NUM_NODES): 0 when they do not divide evenly (saker-run then cannot resize:
// the ranks per node would change).
int even_tasks_per_node(int ntasks, int nodes);

}  // namespace saker::run
