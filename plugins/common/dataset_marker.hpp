// The one place that knows how job_submit_saker.so records a job's datasets in
// slurmctld: a token "saker-datasets=LIST" in the job's admin_comment (why there: see
// job_submit_saker(8); only operators can edit admin_comment, it is saved in slurmctld's
// state and copied into split-off array tasks and requeued jobs).
//
// Reading fails closed: a marker that is present but does not parse, or that appears
// twice, is `malformed`, and every caller refuses on it; it never reads as "no datasets".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "policies/dataset_ref.hpp"

namespace saker::plugins {

inline constexpr std::string_view kMarker = "saker-datasets=";

struct MarkerRead {
  enum class State { absent, present, malformed };
  State state = State::absent;
  std::vector<policy::DatasetRef> datasets;  // present: the list (may be empty: "declared none")
  std::string problem;                       // malformed: why
};

// Finds the marker in `text` (null or "" reads as absent). The marker is a token of its
// own: at the start or after a space, its list ends at the next space.
MarkerRead read_marker(const char* text);

// `text` with every marker token removed and `datasets` recorded in one marker token
// at its end (other text, e.g. an operator's note, is kept).
std::string with_marker(std::string_view text, const std::vector<policy::DatasetRef>& datasets);

// `text` with every marker token removed.
std::string without_marker(std::string_view text);

}  // namespace saker::plugins
