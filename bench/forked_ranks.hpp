// Two-process benchmarks: each rank is a forked child (so each has its own library state,
// as real ranks do), and rank 0 hands its figures back to the parent through a pipe.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <vector>

namespace saker::bench {

// Runs body(rank, out_fd) in `ranks` children, reads `len` bytes that rank 0 writes to
// out_fd into `figures`, and waits for every child. False (and a line on stderr naming
// `prog`) when rank 0 sent less.
template <class Body>
bool run_forked_ranks(int ranks, const char* prog, void* figures, std::size_t len, Body body) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return false;
  std::vector<pid_t> pids;
  for (int r = 0; r < ranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      try {
        body(r, pipefd[1]);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: rank %d: %s\n", prog, r, e.what());
        _exit(1);
      }
      _exit(0);
    }
    pids.push_back(pid);
  }
  close(pipefd[1]);  // read() then ends when every rank has exited
  std::size_t got = 0;
  for (ssize_t n = 1; got < len && n > 0; got += n > 0 ? static_cast<std::size_t>(n) : 0)
    n = read(pipefd[0], static_cast<char*>(figures) + got, len - got);
  for (pid_t p : pids) waitpid(p, nullptr, 0);
  close(pipefd[0]);
  if (got < len) std::fprintf(stderr, "%s: no figures from rank 0\n", prog);
  return got == len;
}

}  // namespace saker::bench
