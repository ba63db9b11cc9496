// A job id as scontrol, squeue and job_modify spell it: "123" (a plain job, an array's
// meta record or a het job's leader), "123+1" (component 1 of het job 123), "123_4"
// (task 4 of array 123). strtoul() on the last two silently reads the leader's or the
// array's id, which is how an update could be judged on the wrong job's datasets.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace saker::plugins {

struct JobRef {
  enum class Kind { plain, het_component, array_task };
  Kind kind = Kind::plain;
  std::uint32_t id = 0;    // the job, the het leader, or the array
  std::uint32_t part = 0;  // het offset or array task id
  std::string str() const;
  bool operator==(const JobRef&) const = default;
};

// Parses one id; nullopt for anything else (ranges "123_[1-3]", lists, names, "0",
// overflow, trailing text). Callers refuse what they cannot parse.
std::optional<JobRef> parse_job_ref(std::string_view text);

}  // namespace saker::plugins
