// Dataset-name globs in grants. Validated at load time so that a typo such as
// "patients[" is an error with a line number, not a grant that silently never matches.
#include <fnmatch.h>

#include <cctype>

#include "policies/model.hpp"

namespace saker::policy {

std::string validate_glob(std::string_view glob) {
  if (glob.empty()) return "empty";
  if (glob.size() > 256) return "longer than 256 characters";
  for (std::size_t i = 0; i < glob.size(); ++i) {
    const char c = glob[i];
    if (c == '[') {
      const std::size_t close = glob.find(']', i + 1);
      if (close == std::string_view::npos) return "'[' at position " + std::to_string(i + 1) + " is never closed";
      if (close == i + 1 || (close == i + 2 && glob[i + 1] == '!')) return "empty [] class";
      for (std::size_t j = i + 1; j < close; ++j)
        if (glob[j] == '[') return "nested '[' in a class";
      i = close;
    } else if (c == ']') {
      return "']' at position " + std::to_string(i + 1) + " without '['";
    } else if (!(std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '_' || c == '-' || c == '*' ||
                 c == '?')) {
      return "character '" + std::string(1, c) + "' cannot occur in a dataset name";
    }
  }
  return {};
}

bool glob_match(const std::string& glob, const std::string& name) {
  return fnmatch(glob.c_str(), name.c_str(), 0) == 0;
}

}  // namespace saker::policy
