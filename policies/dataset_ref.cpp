#include "policies/dataset_ref.hpp"

#include <cctype>
#include <cstring>

#include "common/error.hpp"

namespace saker::policy {
namespace {

constexpr const char* kSyntax = "use NAME[@VERSION][,NAME[@VERSION]...], e.g. --dataset=imagenet@2012,patients";

bool valid_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '_' || c == '-';
}

// Names and versions: letters, digits, '.', '_', '-', starting with a letter or digit.
void check_token(std::string_view token, std::string_view element, const char* what) {
  const std::string quoted = "'" + std::string(element) + "'";
  if (token.empty())
    throw Error(explain("bad dataset " + quoted, std::string("empty ") + what, kSyntax));
  if (token.size() > kMaxDatasetNameLength)
    throw Error(explain("bad dataset " + quoted,
                        std::string(what) + " longer than " + std::to_string(kMaxDatasetNameLength) +
                            " characters",
                        kSyntax));
  if (std::isalnum(static_cast<unsigned char>(token.front())) == 0)
    throw Error(explain("bad dataset " + quoted,
                        std::string(what) + " must start with a letter or digit", kSyntax));
  for (char c : token)
    if (!valid_char(c))
      throw Error(explain("bad dataset " + quoted,
                          std::string(what) + " has the character '" + std::string(1, c) +
                              "'; allowed are letters, digits, '.', '_' and '-'",
                          kSyntax));
}

}  // namespace

std::vector<DatasetRef> parse_dataset_list(std::string_view text) {
  if (text.empty()) throw Error(explain("empty --dataset value", "no dataset named", kSyntax));
  std::vector<DatasetRef> refs;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string_view element =
        text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    const std::size_t at = element.find('@');
    DatasetRef ref;
    if (at == std::string_view::npos) {
      check_token(element, element, "name");
      ref.name = element;
    } else {
      check_token(element.substr(0, at), element, "name");
      check_token(element.substr(at + 1), element, "version");
      ref.name = element.substr(0, at);
      ref.version = element.substr(at + 1);
    }
    for (const auto& seen : refs)
      if (seen == ref)
        throw Error(explain("bad --dataset value", "'" + ref.str() + "' is listed twice", "name each dataset once"));
    refs.push_back(std::move(ref));
    if (refs.size() > kMaxDatasetsPerJob)
      throw Error(explain("bad --dataset value",
                          "more than " + std::to_string(kMaxDatasetsPerJob) + " datasets",
                          "declare at most " + std::to_string(kMaxDatasetsPerJob) + " datasets per job"));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return refs;
}

bool dataset_matches(const std::string& recorded, const DatasetRef& query, bool* unpinned) {
  const std::size_t at = recorded.find('@');
  const std::string version = at == std::string::npos ? "" : recorded.substr(at + 1);
  if (recorded.substr(0, at) != query.name) return false;
  if (query.version.empty() || version == query.version) return true;
  if (!version.empty()) return false;
  if (unpinned != nullptr) *unpinned = true;
  return true;
}

std::string format_dataset_list(const std::vector<DatasetRef>& refs) {
  std::string out;
  for (const auto& r : refs) {
    if (!out.empty()) out += ',';
    out += r.str();
  }
  return out;
}

std::vector<DatasetRef> datasets_from_env(const char* const* env, std::size_t count) {
  const std::size_t prefix = std::strlen(kDatasetsEnvName);
  for (std::size_t i = 0; i < count; ++i) {
    const char* entry = env[i];
    if (entry == nullptr) continue;
    if (std::strncmp(entry, kDatasetsEnvName, prefix) == 0 && entry[prefix] == '=')
      return parse_dataset_list(entry + prefix + 1);
  }
  return {};
}

}  // namespace saker::policy
