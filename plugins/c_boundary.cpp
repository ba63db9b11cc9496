#include "plugins/c_boundary.hpp"

namespace saker::plugin {
namespace {

void slurm_sink(saker::log::Level level, const char* line) {
  switch (level) {
    case saker::log::Level::debug: slurm_debug("%s", line); break;
    case saker::log::Level::info: slurm_info("%s", line); break;
    case saker::log::Level::warn: slurm_info("warning: %s", line); break;
    case saker::log::Level::error: slurm_error("%s", line); break;
  }
}

}  // namespace

void log_to_slurm() { saker::log::set_sink(&slurm_sink); }

}  // namespace saker::plugin
