#include "common/reserved_port.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/error.hpp"

namespace saker {

ReservedPort::ReservedPort(int port, const std::string& address) {
  const std::string which = (port == 0 ? "a free TCP port" : "TCP port " + std::to_string(port)) +
                            (address.empty() ? "" : " on " + address);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  if (!address.empty() && ::inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1)
    throw Error(explain("cannot hold " + which, "'" + address + "' is not an IPv4 address", "give an address like 127.0.0.1"));
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);  // CLOEXEC: the ranks do not inherit it
  if (fd_ < 0) throw Error(explain("cannot create a socket to hold " + which, std::strerror(errno), "check ulimit -n"));
  const int one = 1;
  socklen_t len = sizeof addr;
  if (::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd_);
    throw Error(explain("cannot hold " + which + " for a rendezvous", why,
                        "pick another port (saker-run: --master-port), or stop what holds it"));
  }
  port_ = ntohs(addr.sin_port);
}

ReservedPort::~ReservedPort() { ::close(fd_); }

}  // namespace saker
