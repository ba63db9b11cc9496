#include "launcher/run/node_probe.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <slurm/slurm.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "common/hostlist.hpp"

namespace saker::run {

bool tcp_reachable(const std::string& address, int port, int timeout_ms) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || found == nullptr) return false;
  bool ok = false;
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd >= 0) {
    if (::connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
      ok = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int err = 0;
      socklen_t len = sizeof err;
      ok = ::poll(&p, 1, timeout_ms) == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return ok;
}

std::vector<std::string> unreachable_nodes(const std::string& nodelist, int timeout_ms) {
  std::vector<std::string> lost;
  for (const std::string& node : hostlist::expand(nodelist)) {
    node_info_msg_t* info = nullptr;
    if (slurm_load_node_single(&info, const_cast<char*>(node.c_str()), SHOW_ALL) != SLURM_SUCCESS || info == nullptr) {
      continue;
    }
    if (info->record_count > 0 && info->node_array[0].node_addr != nullptr && info->node_array[0].port != 0 &&
        !tcp_reachable(info->node_array[0].node_addr, info->node_array[0].port, timeout_ms)) {
      lost.push_back(node);
    }
    slurm_free_node_info_msg(info);
  }
  return lost;
}

}  // namespace saker::run
