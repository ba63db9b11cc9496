// A TCP port held for a rendezvous (saker-run's MASTER_PORT, a benchmark's store) until
// the program that will listen there has started.
//
// Picking a free port and releasing it before rank 0 listens there is a race: on a busy
// host the kernel hands the same port to another program's bind(0) or connect() in
// between, and torch's TCPStore then fails with "Address already in use" (seen in CI
// while other tests opened sockets). The reservation keeps a socket bound to the port,
// with SO_REUSEADDR and never listening: the kernel then never picks the port for anyone
// else, and a bind without SO_REUSEADDR fails, while the rank's own listener, which sets
// SO_REUSEADDR as torch's TCPStore and Saker's store both do, binds and listens there.
// It does not keep other users out: Linux lets any user's SO_REUSEADDR socket bind and
// listen on a port held by a bound, non-listening SO_REUSEADDR socket (no owner check),
// and SO_REUSEPORT, which checks the owner, would keep the rank's own SO_REUSEADDR
// listener out too (both seen as two real uids, kernel 6.18). saker-run therefore checks
// that nothing listens there before the ranks start (saker-run(1), MASTER_PORT).
#pragma once

#include <string>

namespace saker {

class ReservedPort {
 public:
  // Holds a port the kernel chose (port 0) or the given one, on every address or on the
  // IPv4 address given; throws saker::Error naming the port, the reason and the fix.
  explicit ReservedPort(int port = 0, const std::string& address = "");
  ~ReservedPort();
  ReservedPort(const ReservedPort&) = delete;
  ReservedPort& operator=(const ReservedPort&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace saker
