// Is every node of the job still there? After a failed attempt saker-run asks before
// spending a restart: when a node's slurmd refuses connections the node is lost, a new
// srun would fail at once (burning every restart in seconds), and the right move is to
// wait for slurmctld to notice and requeue the job onto healthy nodes.
#pragma once

#include <string>
#include <vector>

namespace saker::run {

// Nodes of `nodelist` whose slurmd does not accept a TCP connection within
// timeout_ms (address and port from slurmctld's node table). Nodes slurmctld does not
// know, or whose address it does not give, are assumed reachable.
std::vector<std::string> unreachable_nodes(const std::string& nodelist, int timeout_ms);

// True when the TCP port accepts a connection within timeout_ms.
bool tcp_reachable(const std::string& address, int port, int timeout_ms);

}  // namespace saker::run
