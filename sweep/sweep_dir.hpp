// A sweep as saker-sweep's commands see it: its file (or its state directory), and the rules
// that keep one state directory to one sweep: a directory records the sweep file it belongs
// to, a changed file is refused once its trials ran (freeze), and lineages on shared storage
// name the sweep that made them. Errors are cli::Failure with saker(7)'s exit codes.
#pragma once

#include <iosfwd>
#include <string>

#include "sweep/spec.hpp"

namespace saker::sweep {

// A sweep: the spec, and the file it came from ("" : loaded from its state directory).
struct Sweep {
  Spec spec;
  std::string file;
};

// A sweep file, or a sweep's state directory (its frozen copy and origin). Read-only.
// Refuses a file whose dir: holds another sweep file's state.
Sweep load_sweep(const std::string& what);

// For status, best and report: load_sweep, and a note on `err` when the file changed since
// its trials first ran (these commands read the file as it is now).
Sweep load_sweep_reading(const std::string& what, std::ostream& err);

// Before a sweep runs (run, submit): records the sweep file in its directory the first
// time; later, refuses a changed one. Claims the sweep's lineages on shared storage.
void freeze(const Sweep& s);

}  // namespace saker::sweep
