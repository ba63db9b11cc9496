// Limits a policy file must respect before libyaml sees it. libyaml's scanner keeps a
// "possible simple key" per open flow collection and walks that stack for every token,
// so `[[[[...` nested 20k deep costs seconds and 100k minutes before any depth check on
// the finished tree could run. These checks look at the bytes (and then at parser
// events) and stop at the first violation, with FILE:LINE:COLUMN.
#pragma once

#include <string>
#include <string_view>

#include "saker/policy.hpp"

namespace saker::policy::yaml {

// Size, then flow nesting ('[' and '{' outside quotes and comments): a single linear
// pass over the bytes. Throws LoadError at the first violation.
void check_bytes(std::string_view text, const std::string& file, const LoadLimits& limits);

}  // namespace saker::policy::yaml
