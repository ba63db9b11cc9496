// Logging: inside a Slurm daemon the plugin installs a sink that forwards to Slurm's
// log (slurm_info/slurm_error); everywhere else lines go to stderr. Every line starts
// with "saker: " so operators can grep one prefix across daemons and tools.
#pragma once

#include <string>

namespace saker::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3 };

using Sink = void (*)(Level, const char* line);

// Replaces the sink (nullptr restores stderr). Not thread-safe: call it once, at
// plugin init or program start.
void set_sink(Sink sink);
// Messages below this level are dropped (default: info; SAKER_LOG_LEVEL=debug lowers it).
void set_level(Level level);
Level level();

void write(Level level, const std::string& message);
inline void debug(const std::string& m) { write(Level::debug, m); }
inline void info(const std::string& m) { write(Level::info, m); }
inline void warn(const std::string& m) { write(Level::warn, m); }
inline void error(const std::string& m) { write(Level::error, m); }

}  // namespace saker::log
