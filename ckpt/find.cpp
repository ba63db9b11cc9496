#include "ckpt/find.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "ckpt/provenance.hpp"
#include "common/error.hpp"
#include "common/json.hpp"
#include "saker/ckpt.hpp"

namespace saker::ckpt::find {

namespace fs = std::filesystem;

namespace {

// What a checkpoint says about itself, read once.
struct Node {
  fs::path file;
  std::uint64_t step = 0;
  std::string job_id;
  std::vector<std::string> enforced, by_flag;
  std::vector<std::string> parents;  // SHA-256 of each
  std::string sha256;                // computed only when it may be someone's parent
};

std::vector<fs::path> checkpoints_under(const fs::path& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    throw Error(explain("saker-ckpt find: " + root.string() + " is not a directory", "find searches directories",
                        "give the checkpoint directories (or a directory above them, e.g. a sweep's)"));
  std::vector<fs::path> out = list_checkpoints(root);
  for (fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec), end; it != end;
       it.increment(ec)) {
    if (ec) break;
    if (it->is_directory(ec) && !it->is_symlink(ec)) {
      const auto more = list_checkpoints(it->path());
      out.insert(out.end(), more.begin(), more.end());
    }
  }
  return out;
}

// The first reason the node names the dataset itself ("" when it does not).
std::string names_dataset(const Node& n, const policy::DatasetRef& query, bool* unpinned) {
  for (const auto& d : n.enforced)
    if (policy::dataset_matches(d, query, unpinned)) return "enforced " + d;
  for (const auto& d : n.by_flag)
    if (policy::dataset_matches(d, query, unpinned)) return "by flag " + d;
  return "";
}

Node read_node(const fs::path& file) {
  const CheckpointInfo info = describe(file);
  Node n;
  n.file = file;
  n.step = info.step;
  for (const auto& d : info.lineage) n.by_flag.push_back(d.str());
  if (!info.provenance.empty()) {
    const auto r = provenance::decode(info.provenance, file.string());
    n.job_id = r.job_id;
    n.enforced = r.enforced;
    for (const auto& p : r.parents) n.parents.push_back(p.sha256);
  }
  return n;
}

}  // namespace

Result derived_from(const std::vector<fs::path>& roots, const policy::DatasetRef& query) {
  Result result;
  std::vector<Node> nodes;
  std::set<fs::path> seen;
  for (const fs::path& root : roots)
    for (const fs::path& f : checkpoints_under(root)) {
      if (!seen.insert(fs::weakly_canonical(f)).second) continue;
      try {
        nodes.push_back(read_node(f));
      } catch (const std::exception& e) {
        result.unreadable.push_back(f.string() + ": " + e.what());
      }
    }
  result.examined = nodes.size() + result.unreadable.size();
  std::vector<bool> taken(nodes.size(), false);
  std::vector<std::size_t> frontier;  // found in the last generation: their digests
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    bool unpinned = false;
    if (std::string why = names_dataset(nodes[i], query, &unpinned); !why.empty()) {
      result.found.push_back({nodes[i].file, nodes[i].step, nodes[i].job_id, "", why, unpinned, 0});
      taken[i] = true;
      frontier.push_back(i);
    }
  }
  // Children name parents by digest: hash the found ones, then look for their children,
  // generation by generation (a digest chain cannot loop: SHA-256).
  for (int generation = 1; !frontier.empty(); ++generation) {
    std::map<std::string, std::size_t> digests;  // digest -> index of the parent node
    for (std::size_t i : frontier) {
      nodes[i].sha256 = provenance::file_sha256(nodes[i].file);
      digests[nodes[i].sha256] = i;
    }
    std::vector<std::size_t> next;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      if (taken[i]) continue;
      for (const std::string& p : nodes[i].parents) {
        const auto it = digests.find(p);
        if (it == digests.end()) continue;
        result.found.push_back({nodes[i].file, nodes[i].step, nodes[i].job_id, "", "parent " + nodes[it->second].file.string(),
                                false, generation});
        taken[i] = true;
        next.push_back(i);
        break;
      }
    }
    frontier = std::move(next);
  }
  for (Found& f : result.found)
    for (const Node& n : nodes)
      if (n.file == f.file) f.sha256 = n.sha256.empty() ? provenance::file_sha256(n.file) : n.sha256;
  return result;
}

std::string table(const policy::DatasetRef& query, const Result& r) {
  std::string out;
  for (const Found& f : r.found)
    out += f.file.string() + "  step " + std::to_string(f.step) + "  job " + (f.job_id.empty() ? "-" : f.job_id) + "  " +
           f.why + (f.version_unpinned ? " (no version named)" : "") + "  sha256 " + f.sha256.substr(0, 16) + "\n";
  for (const std::string& u : r.unreadable) out += "UNREADABLE  " + u + "\n";
  out += std::to_string(r.found.size()) + " of " + std::to_string(r.examined) + " checkpoint(s) derived from " + query.str() +
         (r.unreadable.empty() ? "" : "; " + std::to_string(r.unreadable.size()) + " could not be judged (above)") + "\n";
  return out;
}

std::string json(const policy::DatasetRef& query, const Result& r) {
  json::Writer w;
  w.begin_object().key("dataset").value(query.str()).key("examined").value(static_cast<std::uint64_t>(r.examined));
  w.key("checkpoints").begin_array();
  for (const Found& f : r.found) {
    w.begin_object().key("file").value(f.file.string()).key("step").value(f.step).key("job_id").value(f.job_id);
    w.key("sha256").value(f.sha256).key("why").value(f.why).key("version_unpinned").value(f.version_unpinned);
    w.key("generation").value(f.generation).end_object();
  }
  w.end_array().key("unreadable").strings(r.unreadable).end_object();
  return w.str() + "\n";
}

}  // namespace saker::ckpt::find
