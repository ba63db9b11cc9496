#include "common/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace saker::log {
namespace {

Sink g_sink = nullptr;

Level initial_level() {
  const char* env = std::getenv("SAKER_LOG_LEVEL");
  if (env == nullptr) return Level::info;
  if (std::strcmp(env, "debug") == 0) return Level::debug;
  if (std::strcmp(env, "warn") == 0) return Level::warn;
  if (std::strcmp(env, "error") == 0) return Level::error;
  return Level::info;
}

Level g_level = initial_level();

const char* tag(Level l) {
  switch (l) {
    case Level::debug: return "debug: ";
    case Level::info: return "";
    case Level::warn: return "warning: ";
    case Level::error: return "error: ";
  }
  return "";
}

}  // namespace

void set_sink(Sink sink) { g_sink = sink; }
void set_level(Level l) { g_level = l; }
Level level() { return g_level; }

void write(Level l, const std::string& message) {
  if (l < g_level) return;
  if (g_sink != nullptr) {
    // Slurm's own log adds its level; we only add our prefix.
    g_sink(l, ("saker: " + message).c_str());
    return;
  }
  std::fprintf(stderr, "saker: %s%s\n", tag(l), message.c_str());
}

}  // namespace saker::log
