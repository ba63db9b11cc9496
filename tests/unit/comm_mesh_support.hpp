// Ranks' listeners on loopback for tests that build Mesh objects by hand.
#pragma once

#include <unistd.h>

#include <string>
#include <vector>

#include "launcher/comm/mesh.hpp"
#include "launcher/comm/net.hpp"

namespace saker::comm::test {

// n ranks' listeners on 127.0.0.1 (ephemeral ports) and their PeerInfo, for tests that
// build Mesh objects by hand.
struct LoopbackPeers {
  std::vector<PeerInfo> peers;
  std::vector<net::Fd> listeners;
};
inline LoopbackPeers loopback_peers(int n) {
  LoopbackPeers out;
  for (int r = 0; r < n; ++r) {
    int port = 0;
    out.listeners.push_back(net::listen_on("127.0.0.1", 0, &port));
    out.peers.push_back({"127.0.0.1", port, "host" + std::to_string(r), "n" + std::to_string(r), getpid(), "m"});
  }
  return out;
}

}  // namespace saker::comm::test
