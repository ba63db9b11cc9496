// What saker-run's unit tests share: a scratch directory and a --local run of a shell
// script as every rank.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "launcher/run/options.hpp"

namespace saker::run::test {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    char tmpl[] = "/tmp/saker-run-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string read(const std::string& name) const {
    std::ifstream in(path / name);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
};

// n ranks of `sh -c script` on this host, a short grace period.
inline RunOptions local(int n, const std::string& script) {
  RunOptions o;
  o.local = true;
  o.ntasks = n;
  o.grace_s = 5;
  o.program = {"/bin/sh", "-c", script};
  return o;
}

}  // namespace saker::run::test
