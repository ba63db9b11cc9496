// The port saker-run hands the ranks as MASTER_PORT (and a benchmark its store's) is held
// until they are done: the kernel must not give it to anyone else (a plain bind fails),
// while rank 0's listener, which sets SO_REUSEADDR as torch's TCPStore and Saker's store
// do, binds, listens and takes connections there. Before, the port was released before
// rank 0 listened, and a busy CI host gave it to another test's socket ("Address already
// in use").
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>

#include "common/error.hpp"
#include "common/reserved_port.hpp"

using saker::ReservedPort;

namespace {

// bind() a new socket to 0.0.0.0:port; returns the fd, or -errno.
int bind_to(int port, bool reuse) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  const int one = 1;
  if (reuse) REQUIRE(::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    const int e = errno;
    ::close(fd);
    return -e;
  }
  return fd;
}

// Whether a connection to 127.0.0.1:port is accepted (the kernel completes it for a
// listener; nothing listening refuses it at once).
bool reachable(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

TEST_CASE("a reserved port is refused to others and open to a SO_REUSEADDR listener") {
  ReservedPort held;
  REQUIRE(held.port() > 0);
  REQUIRE(held.port() < 65536);
  // Anyone else (no SO_REUSEADDR, as a program's bind or another picker's) is refused.
  CHECK(bind_to(held.port(), false) == -EADDRINUSE);
  // Nothing listens yet: a rank that connects early is refused, not misled.
  CHECK_FALSE(reachable(held.port()));
  // Rank 0's store binds and listens there, and clients reach it.
  const int listener = bind_to(held.port(), true);
  REQUIRE(listener >= 0);
  REQUIRE(::listen(listener, 8) == 0);
  CHECK(reachable(held.port()));
  ::close(listener);
}

TEST_CASE("a reserved port is free again once released") {
  int port = 0;
  {
    ReservedPort held;
    port = held.port();
  }
  const int fd = bind_to(port, false);
  CHECK(fd >= 0);
  if (fd >= 0) ::close(fd);
}

TEST_CASE("two reservations never share a port, and a taken explicit port is refused by name") {
  ReservedPort a, b;
  CHECK(a.port() != b.port());
  const int listener = bind_to(0, true);
  REQUIRE(listener >= 0);
  REQUIRE(::listen(listener, 8) == 0);
  sockaddr_in s{};
  socklen_t len = sizeof s;
  REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&s), &len) == 0);
  const int busy = ntohs(s.sin_port);
  CHECK_THROWS_WITH(ReservedPort(busy), Catch::Contains("TCP port " + std::to_string(busy)) &&
                                            Catch::Contains("Address already in use") && Catch::Contains("--master-port"));
  ::close(listener);
}

TEST_CASE("a port held on one address: others refused there, a bad address refused by name") {
  ReservedPort held(0, "127.0.0.1");
  CHECK(held.port() > 0);
  CHECK(bind_to(held.port(), false) == -EADDRINUSE);  // 0.0.0.0 overlaps 127.0.0.1
  CHECK_THROWS_WITH(ReservedPort(0, "node1"), Catch::Contains("'node1' is not an IPv4 address"));
}
