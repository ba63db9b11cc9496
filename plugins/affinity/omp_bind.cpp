#include "plugins/affinity/omp_bind.hpp"

#include "common/error.hpp"

namespace saker::affinity {

OmpBind parse_omp_bind(const std::string& text, const std::string& where) {
  if (text == "none") return OmpBind::none;
  if (text == "close") return OmpBind::close;
  if (text == "spread") return OmpBind::spread;
  throw Error(explain(where + ": unknown value '" + text + "'", "the values are none, close and spread",
                      "write none (the default: OMP_NUM_THREADS only, threads float over the task's CPUs), close or "
                      "spread (also OMP_PLACES, one per core, and OMP_PROC_BIND with that policy)"));
}

std::string_view omp_bind_name(OmpBind bind) {
  switch (bind) {
    case OmpBind::close:
      return "close";
    case OmpBind::spread:
      return "spread";
    case OmpBind::none:
      break;
  }
  return "none";
}

}  // namespace saker::affinity
