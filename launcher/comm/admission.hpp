// Who keeps a place when a listener's table of unproven connections is full (issue 28:
// denial of service by silent connections). The store and every rank's link listener
// hold at most a bounded number of connections that have not yet proved the job key; a
// newcomer makes room by dropping a silent one, or when none is silent one still in its
// handshake (copies of a Hello seen on the wire pass the key id check, then never answer
// the challenge). The same rule picks among either kind. Dropping the oldest silent connection
// overall let a flood from one host push out a rank from another host whose Hello was a
// few milliseconds late on a loaded machine (seen in CI). So the victim is the oldest
// silent connection of the host that holds the most of them: a flood only ever pushes
// out its own connections, unless the flood comes from the rank's own host, and there
// the rank's client reconnects (auth::connect_authenticated).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace saker::comm::admission {

// The host of auth::peer_address's "host:port" (the whole text when it has no port).
std::string_view host_of(std::string_view address);

// silent_hosts: the host of each candidate connection, oldest first. Returns the position of
// the one to drop: the oldest of the host with the most entries (ties: the host whose
// oldest entry is older); nullopt when the list is empty.
std::optional<std::size_t> victim(const std::vector<std::string_view>& silent_hosts);

}  // namespace saker::comm::admission
