#include "plugins/affinity/gres_check.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <optional>
#include <string_view>

#include "common/error.hpp"
#include "common/hostlist.hpp"
#include "plugins/affinity/cpu_list.hpp"

namespace saker::affinity {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The pieces of `text` between separators: every piece as std::getline gives them (an
// empty piece only before a separator), or with `words`, the non-empty ones as `>>` does.
// Plain splitting, not std::istringstream: slurmstepd runs this check at every step,
// and an iostream would build the C++ locale there first (common/file.hpp).
template <typename IsSeparator>
std::vector<std::string_view> split(std::string_view text, IsSeparator is_separator, bool words) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (!is_separator(text[i])) continue;
    if (i > start || !words) out.push_back(text.substr(start, i - start));
    start = i + 1;
  }
  if (start < text.size()) out.push_back(text.substr(start));
  return out;
}

bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

// KEY=VALUE words of one gres.conf line (keys lower-cased; '#' starts a comment).
std::map<std::string, std::string> fields(std::string_view line) {
  std::map<std::string, std::string> out;
  for (std::string_view word : split(line.substr(0, line.find('#')), is_space, true)) {
    const auto eq = word.find('=');
    if (eq != std::string_view::npos) out[lower(std::string(word.substr(0, eq)))] = std::string(word.substr(eq + 1));
  }
  return out;
}

struct Device {
  unsigned index = 0;
  GpuVendor vendor = GpuVendor::nvidia;
};

// By the file name, so device nodes outside /dev (test clusters, containers) count too.
std::optional<Device> device_of(const std::string& path) {
  const std::string base = path.substr(path.rfind('/') + 1);
  unsigned n = 0;
  char tail = 0;
  if (std::sscanf(base.c_str(), "nvidia%u%c", &n, &tail) == 1) return Device{n, GpuVendor::nvidia};
  if (std::sscanf(base.c_str(), "renderD%u%c", &n, &tail) == 1 && n >= 128) return Device{n - 128, GpuVendor::amd};
  return std::nullopt;
}

IndexList cores_near(const Machine& m, const Gpu& g) {
  IndexList out;
  for (std::size_t c = 0; c < m.cores.size(); ++c)
    if (!intersect(m.cores[c].pus, g.local_pus).empty()) out.push_back(static_cast<unsigned>(c));
  return out;
}

bool applies_to(const std::map<std::string, std::string>& f, const std::string& node) {
  const auto it = f.find("nodename");
  if (it == f.end() || node.empty()) return true;
  // A plain name or list needs no hostlist expansion (libslurm) for each line.
  if (it->second.find('[') == std::string::npos) {
    for (std::string_view name : split(it->second, [](char c) { return c == ','; }, true))
      if (name == node) return true;
    return false;
  }
  try {
    const auto names = saker::hostlist::expand(it->second);
    return std::find(names.begin(), names.end(), node) != names.end();
  } catch (const std::exception&) {
    return it->second == node;
  }
}

}  // namespace

std::vector<std::string> expand_gres_files(const std::string& spec) {
  const auto open = spec.find('[');
  if (open == std::string::npos) return {spec};
  const auto close = spec.find(']', open);
  if (close == std::string::npos) throw Error("saker: gres.conf File=" + spec + " has '[' without ']'");
  std::vector<std::string> out;
  for (unsigned i : parse_index_list(spec.substr(open + 1, close - open - 1), "gres.conf File=" + spec))
    for (const auto& rest : expand_gres_files(spec.substr(close + 1)))
      out.push_back(spec.substr(0, open) + std::to_string(i) + rest);
  return out;
}

std::vector<std::string> check_gres_conf(const Machine& m, const std::string& text, const std::string& node) {
  std::vector<std::string> problems;
  std::vector<bool> listed(m.gpus.size(), false);
  std::optional<unsigned> previous;
  unsigned lineno = 0;
  for (std::string_view line : split(text, [](char c) { return c == '\n'; }, false)) {
    ++lineno;
    const auto f = fields(line);
    const auto name = f.find("name");
    if (name == f.end() || lower(name->second) != "gpu" || !applies_to(f, node)) continue;
    const std::string where = "gres.conf line " + std::to_string(lineno);
    const auto file = f.find("file");
    if (file == f.end()) continue;  // Count= only (AutoDetect): nothing to compare
    std::vector<std::string> paths;
    try {
      paths = expand_gres_files(file->second);
    } catch (const std::exception& e) {
      problems.push_back(where + ": " + e.what());
      continue;
    }
    std::optional<IndexList> cores;
    if (const auto c = f.find("cores"); c != f.end()) {
      try {
        cores = parse_index_list(c->second, "Cores=");
      } catch (const std::exception& e) {
        problems.push_back(where + ": " + e.what());
      }
    }
    for (const auto& path : paths) {
      const auto dev = device_of(path);
      if (!dev) {
        problems.push_back(where + ": File=" + path + " is not a /dev/nvidiaN or /dev/dri/renderD device");
        continue;
      }
      if (dev->index >= m.gpus.size()) {
        problems.push_back(where + ": File=" + path + " names GPU " + std::to_string(dev->index) +
                           ", but the topology has " + std::to_string(m.gpus.size()) + " GPU(s)");
        continue;
      }
      const Gpu& g = m.gpus[dev->index];
      const std::string label = "GPU " + std::to_string(g.index) + " (" + g.pci_bus_id + ")";
      listed[g.index] = true;
      if (previous && dev->index <= *previous)
        problems.push_back(where + ": File=" + path + " comes after GPU " + std::to_string(*previous) +
                           ": Slurm numbers GPUs in file order, so its indexes differ from the topology's");
      previous = dev->index;
      if (g.vendor != dev->vendor)
        problems.push_back(where + ": File=" + path + " is a " + vendor_name(dev->vendor) + " device, but " + label +
                           " is " + vendor_name(g.vendor));
      const IndexList near = cores_near(m, g);
      if (cores && *cores != near)
        problems.push_back(where + ": File=" + path + " has Cores=" + format_index_list(*cores) + ", but " + label +
                           " is local to cores " + format_index_list(near) + " (NUMA node " +
                           std::to_string(m.numas[g.numa].os_index) + ")");
    }
    if (const auto links = f.find("links"); links != f.end()) {
      const auto entries = split(links->second, [](char c) { return c == ','; }, false);
      if (entries.size() != m.gpus.size())
        problems.push_back(where + ": Links=" + links->second + " has " + std::to_string(entries.size()) +
                           " entries, but the topology has " + std::to_string(m.gpus.size()) + " GPU(s)");
      else if (paths.size() == 1)
        if (const auto dev = device_of(paths.front()); dev && dev->index < entries.size() && entries[dev->index] != "-1")
          problems.push_back(where + ": Links=" + links->second + " should have -1 at position " +
                             std::to_string(dev->index) + " (the GPU itself)");
    }
  }
  for (std::size_t i = 0; i < listed.size(); ++i)
    if (!listed[i] && previous)
      problems.push_back("gres.conf: GPU " + std::to_string(i) + " (" + m.gpus[i].pci_bus_id +
                         ") is in the topology but no File= names it");
  return problems;
}

}  // namespace saker::affinity
