#include "plugins/affinity/hwloc_reason.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <sstream>
#include <vector>

extern char** environ;

namespace saker::affinity {
namespace {

// hwloc's own lines ("FILE: reason"), without the ones that only say that it failed.
std::string useful_lines(const std::string& text) {
  std::istringstream in(text);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    if (line.find("without DTD") != std::string::npos || line.find("discovery failed") != std::string::npos ||
        line.rfind("hwloc_topology_load", 0) == 0 || line.empty())
      continue;
    const auto colon = line.find(": ");
    out += (out.empty() ? "" : "; ") + (colon == std::string::npos ? line : line.substr(colon + 2));
  }
  return out;
}

}  // namespace

std::string hwloc_reason(const std::string& path) {
  try {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return {};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
    std::vector<std::string> env_text{"HWLOC_XML_VERBOSE=1"};
    for (char** e = environ; e != nullptr && *e != nullptr; ++e)
      if (std::string(*e).rfind("HWLOC_", 0) != 0) env_text.emplace_back(*e);
    std::vector<char*> envp;
    for (auto& e : env_text) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string arg0 = "hwloc-info", arg1 = "--input", arg2 = path;
    char* argv[] = {arg0.data(), arg1.data(), arg2.data(), nullptr};
    pid_t pid = 0;
    const int rc = ::posix_spawnp(&pid, "hwloc-info", &actions, nullptr, argv, envp.data());
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    if (rc != 0) {
      ::close(fds[0]);
      return {};
    }
    std::string text;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    char buf[1024];
    while (text.size() < 8192) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{fds[0], POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      const ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n <= 0) break;
      text.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fds[0]);
    ::kill(pid, SIGKILL);  // a no-op when it is done; a hung one must not outlive us
    ::waitpid(pid, nullptr, 0);
    return useful_lines(text);
  } catch (...) {
    return {};
  }
}

}  // namespace saker::affinity
