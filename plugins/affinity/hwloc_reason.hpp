// hwloc explains why it refuses an XML file only on stderr, and only when
// HWLOC_XML_VERBOSE is set before the process's first XML import (hwloc reads it once).
// A library loaded into slurmstepd can do neither, so on a refusal this asks hwloc's
// own hwloc-info, in a child process, and returns what it said.
#pragma once

#include <string>

namespace saker::affinity {

// hwloc's reason for refusing the XML file at `path`, e.g. "unrecognized object type
// string Bogus"; empty when hwloc-info is not installed or said nothing useful within
// two seconds. Never throws.
std::string hwloc_reason(const std::string& path);

}  // namespace saker::affinity
