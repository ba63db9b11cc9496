// saker-run's elastic decisions (issue 32): --nodes, --on-node-loss, where the next
// attempt runs after a lost node or a returning one, and what the supervisor decides.
#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "launcher/run/elastic.hpp"
#include "launcher/run/options.hpp"
#include "launcher/run/supervisor.hpp"

using namespace saker::run;

namespace {
const std::vector<std::string> kFour = {"saker1", "saker2", "saker3", "saker4"};

std::string refusal(const std::string& text) {
  try {
    parse_node_range(text);
  } catch (const saker::Error& e) {
    return e.what();
  }
  return "";
}

Attempt failed_attempt() {
  Attempt a;
  a.number = 1;
  a.outcome = Outcome::failed;
  a.detail = "task 3 (rank 3) on saker4 killed by SIGKILL";
  return a;
}
}  // namespace

TEST_CASE("--nodes takes torchrun's MIN:MAX or N, and a bad range is refused naming it") {
  CHECK(parse_node_range("2:4").min == 2);
  CHECK(parse_node_range("2:4").max == 4);
  CHECK(parse_node_range("3").min == 3);
  CHECK(parse_node_range("3").max == 3);
  CHECK(refusal("4:2").find("--nodes 4:2") != std::string::npos);
  CHECK(refusal("4:2").find("MIN 4 is larger than MAX 2") != std::string::npos);
  for (const char* bad : {"", ":", "0:4", "2:", "a:b", "-1:3", "2:4:6", "1.5:3"}) {
    INFO(bad);
    CHECK(refusal(bad).find(std::string("--nodes ") + bad) != std::string::npos);
  }
}

TEST_CASE("--nodes and --on-node-loss on the command line") {
  const char* argv[] = {"saker-run", "--nodes", "2:4", "--on-node-loss=wait", "--", "x"};
  const RunOptions o = parse_run_options(6, argv, nullptr);
  CHECK(o.nodes.min == 2);
  CHECK(o.nodes.max == 4);
  CHECK(o.on_node_loss == NodeLossPolicy::wait);
  const char* plain[] = {"saker-run", "x"};
  const RunOptions d = parse_run_options(2, plain, nullptr);
  CHECK_FALSE(d.nodes.given());
  CHECK(d.on_node_loss == NodeLossPolicy::shrink);
  const char* bad[] = {"saker-run", "--on-node-loss=drop", "x"};
  CHECK_THROWS_WITH(parse_run_options(3, bad, nullptr), Catch::Contains("--on-node-loss=drop"));
  const char* local[] = {"saker-run", "--local", "--nodes", "1:2", "x"};
  CHECK_THROWS_WITH(parse_run_options(5, local, nullptr), Catch::Contains("--nodes with --local"));
}

TEST_CASE("a lost node shrinks the run onto the survivors while MIN remain") {
  const Placement now{kFour, 2};
  const NodePlan p = plan_node_loss(NodeLossPolicy::shrink, {2, 4}, now, {"saker2"}, true);
  CHECK(p.action == NodeAction::shrink);
  CHECK(p.placement.nodes == std::vector<std::string>{"saker1", "saker3", "saker4"});
  CHECK(p.placement.ntasks() == 6);
  CHECK(p.reason.find("3 of 4 nodes (6 ranks)") != std::string::npos);
  CHECK(placement_args(p.placement) ==
        std::vector<std::string>{"-N", "3", "-n", "6", "--nodelist=saker[1,3-4]"});
  CHECK(placement_args(p.placement, true).back() == "--overlap");
}

TEST_CASE("below MIN the job is requeued, or waits when it cannot be") {
  const Placement now{{"saker1", "saker2"}, 1};
  NodePlan p = plan_node_loss(NodeLossPolicy::shrink, {2, 4}, now, {"saker2"}, true);
  CHECK(p.action == NodeAction::requeue);
  CHECK(p.reason.find("1 node(s) left, below --nodes MIN 2") != std::string::npos);
  p = plan_node_loss(NodeLossPolicy::shrink, {2, 4}, now, {"saker2"}, false);
  CHECK(p.action == NodeAction::wait);
  // Without --nodes both bounds are the allocation's size: the behaviour before issue 32.
  p = plan_node_loss(NodeLossPolicy::shrink, {4, 4}, Placement{kFour, 1}, {"saker4"}, true);
  CHECK(p.action == NodeAction::requeue);
}

TEST_CASE("--on-node-loss=requeue and wait do what they say; no loss, no action") {
  const Placement now{kFour, 1};
  CHECK(plan_node_loss(NodeLossPolicy::requeue, {1, 4}, now, {"saker1"}, true).action == NodeAction::requeue);
  CHECK(plan_node_loss(NodeLossPolicy::wait, {1, 4}, now, {"saker1"}, true).action == NodeAction::wait);
  CHECK(plan_node_loss(NodeLossPolicy::shrink, {1, 4}, now, {}, true).action == NodeAction::none);
}

TEST_CASE("tasks spread unevenly cannot be resized") {
  CHECK(even_tasks_per_node(8, 4) == 2);
  CHECK(even_tasks_per_node(7, 4) == 0);
  const NodePlan p = plan_node_loss(NodeLossPolicy::shrink, {1, 4}, Placement{kFour, 0}, {"saker1"}, true);
  CHECK(p.action == NodeAction::requeue);
  CHECK(p.reason.find("not spread evenly") != std::string::npos);
}

TEST_CASE("a shrunk run grows back onto returned nodes of the allocation, up to MAX, in node order") {
  const Placement now{{"saker1", "saker3"}, 1};
  CHECK(grow_candidates(now, kFour, {"saker4", "saker2"}, {1, 4}) == std::vector<std::string>{"saker2", "saker4"});
  CHECK(grow_candidates(now, kFour, {"saker4", "saker2"}, {1, 3}) == std::vector<std::string>{"saker2"});
  CHECK(grow_candidates(now, {"saker1", "saker3"}, {"saker4"}, {1, 4}).empty());  // not back in the job yet
  CHECK(grown(now, {"saker4", "saker2"}, kFour).nodes == kFour);
}

TEST_CASE("the supervisor shrinks after a failed attempt with a lost node, spending no restart") {
  const Policy policy{0, true, true};
  const Placement now{kFour, 1};
  const NodePlan shrink = plan_node_loss(NodeLossPolicy::shrink, {3, 4}, now, {"saker4"}, true);
  Decision d = decide_attempt(policy, failed_attempt(), 0, shrink);
  CHECK(d.action == Action::shrink);  // --max-restarts 0, yet it goes on
  CHECK(d.reason.find("from the latest checkpoint") != std::string::npos);
  const NodePlan below = plan_node_loss(NodeLossPolicy::shrink, {4, 4}, now, {"saker4"}, true);
  CHECK(decide_attempt(policy, failed_attempt(), 0, below).action == Action::requeue);
  const NodePlan wait = plan_node_loss(NodeLossPolicy::wait, {3, 4}, now, {"saker4"}, true);
  CHECK(decide_attempt(policy, failed_attempt(), 0, wait).action == Action::wait_nodes);
  // No node lost: the program's failure, decided as before.
  CHECK(decide_attempt(policy, failed_attempt(), 0, NodePlan{}).action == Action::give_up);
}

TEST_CASE("classify: a grow is neither a failure nor a preemption") {
  AttemptEnd end;
  end.all_preempted = true;
  end.grow_requested = true;
  std::string detail;
  CHECK(classify(end, &detail) == Outcome::resized);
  CHECK(detail == "the ranks stopped at a checkpoint boundary");
  // SIGTERMed after --resize-wait and then killed: still the grow's doing.
  end = AttemptEnd{};
  end.grow_requested = end.grow_terminated = true;
  end.detail = "srun killed by SIGKILL";
  CHECK(classify(end, &detail) == Outcome::resized);
  // A rank that fails on its own while the grow waits is a failure.
  end = AttemptEnd{};
  end.grow_requested = true;
  end.detail = "task 1 (rank 1) on saker2 exited with code 1";
  CHECK(classify(end, &detail) == Outcome::failed);
  // Preemption wins over a pending grow.
  end = AttemptEnd{};
  end.grow_requested = true;
  end.all_preempted = true;
  end.preempt_signal = 10;
  CHECK(classify(end, &detail) == Outcome::preempted);
  // A resized attempt grows without spending a restart.
  Attempt a;
  a.number = 2;
  a.outcome = Outcome::resized;
  a.detail = "the ranks stopped at a checkpoint boundary";
  const Decision d = decide(Policy{0, true, true}, a, 0);
  CHECK(d.action == Action::grow);
  CHECK(d.reason.find("stopped for the grow") != std::string::npos);
}
