// YAML -> compiled policy. Every problem is a LoadError naming FILE:LINE:COLUMN and
// what was expected; nothing half-loaded ever escapes.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>

#include "common/hash.hpp"
#include "common/hostlist.hpp"
#include "common/json.hpp"
#include "policies/model.hpp"
#include "policies/yaml_doc.hpp"
#include "policies/yaml_reader.hpp"

namespace saker::policy {

using yaml::Node;

LoadError::LoadError(std::string file, int line, int column, const std::string& problem, const std::string& expected)
    // Line 0: the error is about the whole file, which has no position to name.
    : saker::Error(file + (line > 0 ? ":" + std::to_string(line) + ":" + std::to_string(column) : std::string()) +
                   ": " + problem +
                   (expected.empty() ? std::string() : "; expected " + expected)),
      file_(std::move(file)),
      line_(line),
      column_(column) {}

namespace {

constexpr int kSchemaVersion = 1;
constexpr std::size_t kMaxNodesPerSet = 100000;

class Reader : public yaml::Reader {
 public:
  using yaml::Reader::Reader;

  std::vector<const Node*> list(const Node& n, const std::string& what) const {
    expect(n, Node::Kind::sequence, what);
    return n.items;
  }

  std::vector<std::string> names(const Node& n, const std::string& what) const {
    std::vector<std::string> out;
    for (const Node* item : list(n, what)) {
      const std::string& s = name(*item, what + " entry");
      if (std::find(out.begin(), out.end(), s) != out.end()) fail(*item, "duplicate '" + s + "' in " + what, "each once");
      out.push_back(s);
    }
    return out;
  }

  bool boolean(const Node& n, const std::string& what) const {
    const std::string& s = scalar(n, what);
    if (s == "true" || s == "yes") return true;
    if (s == "false" || s == "no") return false;
    fail(n, "bad " + what + " '" + s + "'", "true or false");
  }

  std::uint32_t count(const Node& n, const std::string& what) const {
    const std::string& s = scalar(n, what);
    if (s.size() > 9 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
      fail(n, "bad " + what + " '" + s + "'", "a whole number below 10^9");
    return static_cast<std::uint32_t>(std::stoul(s));
  }

  // A classification's transit: true when its jobs' traffic must be encrypted. off is no
  // choice here: a policy can only ask for more than the default (auth).
  bool transit_encrypt(const Node& n) const {
    const std::string& s = scalar(n, "transit");
    if (s == "encrypt") return true;
    if (s == "auth") return false;
    fail(n, "bad transit '" + s + "'", "auth (the default: every connection authenticated) or encrypt (also AES-256-GCM between nodes)");
  }

  Mode mode(const Node& n, const std::string& what) const {
    const std::string& s = scalar(n, what);
    if (s == "enforce") return Mode::enforce;
    if (s == "audit") return Mode::audit;
    fail(n, "bad mode '" + s + "' for " + what, "enforce or audit");
  }

  std::vector<std::string> hosts(const Node& n, const std::string& what) const {
    const std::string& expr = scalar(n, what);
    std::vector<std::string> out;
    try {
      out = saker::hostlist::expand(expr);
    } catch (const std::exception& e) {
      fail(n, "bad hostlist '" + expr + "' for " + what, "Slurm hostlist syntax such as node[01-16],gpu7");
    }
    if (out.empty() || out.size() > kMaxNodesPerSet)
      fail(n, "hostlist '" + expr + "' has " + std::to_string(out.size()) + " nodes",
           "between 1 and " + std::to_string(kMaxNodesPerSet) + " nodes");
    return out;
  }

};

struct Compiler {
  const Reader& r;
  Policy::Impl& p;
  std::unordered_map<std::string, int> zone_index, storage_index, class_index;
  std::unordered_map<std::string, std::string> node_owner;  // node -> "partition X" (for conflict messages)

  int zone_ref(const Node& n, const std::string& what) {
    const std::string& z = r.name(n, what);
    const auto it = zone_index.find(z);
    if (it == zone_index.end()) r.fail(n, what + " names unknown zone '" + z + "'", "a zone declared under zones:");
    return it->second;
  }

  void place_nodes(const Node& at, const std::vector<std::string>& nodes, int zone, const std::string& owner) {
    for (const auto& node : nodes) {
      const auto [it, fresh] = p.node_zone.emplace(node, zone);
      if (!fresh && it->second != zone)
        r.fail(at, "node " + node + " of " + owner + " is in zone " + p.zones[zone].name + " but " +
                       node_owner[node] + " puts it in zone " + p.zones[it->second].name,
               "each node in one zone");
      node_owner.emplace(node, owner);
    }
  }

  void zones(const Node& n) {
    for (const Node* item : r.list(n, "zones")) {
      auto f = r.fields(*item, "a zone", {"name", "country", "region"}, {"name"});
      Zone z;
      z.name = r.name(*f["name"], "zone name");
      if ((f.count("country") != 0) == (f.count("region") != 0))
        r.fail(*item, "zone " + z.name + " needs exactly one of country: or region:", "country: AE or region: EU");
      const Node& code = f.count("country") != 0 ? *f["country"] : *f["region"];
      z.code = r.name(code, "country or region code");
      if (z.code.size() > 8 || !std::all_of(z.code.begin(), z.code.end(), [](char c) { return c >= 'A' && c <= 'Z'; }))
        r.fail(code, "bad code '" + z.code + "'", "an upper-case country or region code such as AE, DE or EU");
      if (!zone_index.emplace(z.name, static_cast<int>(p.zones.size())).second)
        r.fail(*f["name"], "duplicate zone '" + z.name + "'", "each zone once");
      p.zones.push_back(std::move(z));
    }
  }

  void partitions(const Node& n) {
    for (const Node* item : r.list(n, "partitions")) {
      auto f = r.fields(*item, "a partition", {"name", "zone", "nodes", "gpus_per_node", "cpu_only", "default"},
                        {"name", "zone", "nodes"});
      Partition part;
      part.name = r.name(*f["name"], "partition name");
      part.zone = zone_ref(*f["zone"], "partition " + part.name);
      part.nodes = r.hosts(*f["nodes"], "partition " + part.name);
      if (f.count("gpus_per_node") != 0) part.gpus_per_node = r.count(*f["gpus_per_node"], "gpus_per_node");
      if (f.count("cpu_only") != 0) part.cpu_only = r.boolean(*f["cpu_only"], "cpu_only");
      if (f.count("default") != 0) part.is_default = r.boolean(*f["default"], "default");
      if (part.cpu_only && part.gpus_per_node > 0)
        r.fail(*f["gpus_per_node"], "partition " + part.name + " is cpu_only but has gpus_per_node",
               "one of cpu_only: true or gpus_per_node: N");
      const int index = static_cast<int>(p.partitions.size());
      if (!p.partition_index.emplace(part.name, index).second)
        r.fail(*f["name"], "duplicate partition '" + part.name + "'", "each partition once");
      if (part.is_default) {
        if (p.default_partition >= 0)
          r.fail(*f["default"], "partitions " + p.partitions[p.default_partition].name + " and " + part.name +
                                    " are both default",
                 "at most one default partition (as in slurm.conf)");
        p.default_partition = index;
      }
      place_nodes(*f["nodes"], part.nodes, part.zone, "partition " + part.name);
      p.partitions.push_back(std::move(part));
    }
  }

  void node_sets(const Node& n) {
    std::unordered_map<std::string, int> seen;
    for (const Node* item : r.list(n, "node_sets")) {
      auto f = r.fields(*item, "a node set", {"name", "zone", "nodes"}, {"name", "zone", "nodes"});
      const std::string& set = r.name(*f["name"], "node set name");
      if (!seen.emplace(set, 1).second) r.fail(*f["name"], "duplicate node set '" + set + "'", "each node set once");
      place_nodes(*f["nodes"], r.hosts(*f["nodes"], "node set " + set), zone_ref(*f["zone"], "node set " + set),
                  "node set " + set);
      ++p.node_sets;
    }
  }

  void storage(const Node& n) {
    for (const Node* item : r.list(n, "storage")) {
      auto f = r.fields(*item, "a storage system", {"name", "zone", "mounts", "nodes", "features"},
                        {"name", "zone", "mounts"});
      Storage s;
      s.name = r.name(*f["name"], "storage name");
      s.zone = zone_ref(*f["zone"], "storage " + s.name);
      for (const Node* m : r.list(*f["mounts"], "mounts")) {
        const std::string& path = r.scalar(*m, "mount path");
        std::string norm = std::filesystem::path(path).lexically_normal().string();
        while (norm.size() > 1 && norm.back() == '/') norm.pop_back();
        if (path[0] != '/' || norm == "/")
          r.fail(*m, "bad mount path '" + path + "'", "an absolute directory below /, e.g. /lustre/ae");
        s.mounts.push_back(norm);
      }
      if (s.mounts.empty()) r.fail(*f["mounts"], "storage " + s.name + " has no mounts", "at least one mount path");
      if (f.count("nodes") != 0) s.nodes = r.hosts(*f["nodes"], "storage " + s.name);
      if (f.count("features") != 0) s.features = r.names(*f["features"], "features");
      if (!storage_index.emplace(s.name, static_cast<int>(p.storage.size())).second)
        r.fail(*f["name"], "duplicate storage system '" + s.name + "'", "each storage system once");
      for (const auto& other : p.storage)
        for (const auto& om : other.mounts)
          for (const auto& m : s.mounts)
            if (om == m)
              r.fail(*f["mounts"], "mount " + m + " of storage " + s.name + " is also a mount of " + other.name,
                     "each mount path on one storage system");
      p.storage.push_back(std::move(s));
    }
  }

  void classifications(const Node* n) {
    if (n == nullptr) {
      p.classifications = {{"public", false, false}, {"internal", false, false}, {"restricted", true, true}};
    } else {
      for (const Node* item : r.list(*n, "classifications")) {
        auto f = r.fields(*item, "a classification", {"name", "requires_grant", "encrypt_checkpoints", "transit"}, {"name"});
        Classification c;
        c.name = r.name(*f["name"], "classification name");
        if (f.count("requires_grant") != 0) c.requires_grant = r.boolean(*f["requires_grant"], "requires_grant");
        if (f.count("encrypt_checkpoints") != 0)
          c.encrypt_checkpoints = r.boolean(*f["encrypt_checkpoints"], "encrypt_checkpoints");
        if (f.count("transit") != 0) c.encrypt_transit = r.transit_encrypt(*f["transit"]);
        for (const auto& seen : p.classifications)
          if (seen.name == c.name) r.fail(*f["name"], "duplicate classification '" + c.name + "'", "each once");
        p.classifications.push_back(std::move(c));
      }
    }
    for (std::size_t i = 0; i < p.classifications.size(); ++i)
      class_index[p.classifications[i].name] = static_cast<int>(i);
  }

  int class_ref(const Node& n) {
    const std::string& c = r.name(n, "classification");
    const auto it = class_index.find(c);
    if (it == class_index.end()) {
      std::string list;
      for (const auto& k : p.classifications) list += (list.empty() ? "" : ", ") + k.name;
      r.fail(n, "unknown classification '" + c + "'", "one of: " + list);
    }
    return it->second;
  }

  void datasets(const Node& n) {
    for (const Node* item : r.list(n, "datasets")) {
      auto f = r.fields(*item, "a dataset", {"name", "versions", "classification", "zones", "countries", "replicas"},
                        {"name", "classification"});
      Dataset d;
      d.name = r.name(*f["name"], "dataset name");
      if (f.count("versions") != 0) d.versions = r.names(*f["versions"], "versions");
      d.classification = class_ref(*f["classification"]);
      d.zone_allowed.assign(p.zones.size(), false);
      if (f.count("zones") != 0) {
        d.restricted_zones = true;
        for (const Node* z : r.list(*f["zones"], "zones")) d.zone_allowed[zone_ref(*z, "dataset " + d.name)] = true;
      }
      if (f.count("countries") != 0) {
        d.restricted_zones = true;
        for (const Node* c : r.list(*f["countries"], "countries")) {
          const std::string& code = r.name(*c, "country or region code");
          bool any = false;
          for (std::size_t z = 0; z < p.zones.size(); ++z)
            if (p.zones[z].code == code) d.zone_allowed[z] = any = true;
          if (!any) r.fail(*c, "no zone has country or region '" + code + "'", "a code used by a zone");
        }
      }
      if (f.count("replicas") != 0)
        for (const Node* s : r.list(*f["replicas"], "replicas")) {
          const std::string& sname = r.name(*s, "replica");
          const auto it = storage_index.find(sname);
          if (it == storage_index.end())
            r.fail(*s, "dataset " + d.name + " names unknown storage '" + sname + "'", "a storage system declared under storage:");
          if (d.restricted_zones && !d.zone_allowed[p.storage[it->second].zone])
            r.fail(*s, "replica of dataset " + d.name + " on " + sname + " lies in zone " +
                           p.zones[p.storage[it->second].zone].name + ", where the dataset is not allowed",
                   "replicas only on storage in the dataset's allowed zones");
          if (std::find(d.replicas.begin(), d.replicas.end(), it->second) != d.replicas.end())
            r.fail(*s, "duplicate replica '" + sname + "'", "each storage system once");
          d.replicas.push_back(it->second);
        }
      const int index = static_cast<int>(p.datasets.size());
      if (!p.dataset_index.emplace(d.name, index).second)
        r.fail(*f["name"], "duplicate dataset '" + d.name + "'", "each dataset once (list its versions under versions:)");
      p.datasets.push_back(std::move(d));
    }
  }

  void grants(const Node& n) {
    for (const Node* item : r.list(n, "grants")) {
      auto f = r.fields(*item, "a grant", {"users", "groups", "accounts", "datasets", "classifications"});
      Grant g;
      if (f.count("datasets") != 0)
        for (const Node* d : r.list(*f["datasets"], "datasets")) {
          const std::string& glob = r.scalar(*d, "dataset glob");
          const std::string problem = validate_glob(glob);
          if (!problem.empty()) r.fail(*d, "bad glob '" + glob + "': " + problem, "a glob of *, ?, [a-z] and name characters");
          g.dataset_globs.push_back(glob);
        }
      if (f.count("classifications") != 0)
        for (const Node* c : r.list(*f["classifications"], "classifications")) g.classifications.push_back(class_ref(*c));
      if (g.dataset_globs.empty() && g.classifications.empty())
        r.fail(*item, "a grant that covers no data", "datasets: [globs] and/or classifications: [names]");
      const int index = static_cast<int>(p.grants.size());
      bool anyone = false;
      const auto index_by = [&](const char* key, auto& map) {
        if (f.count(key) == 0) return;
        for (const auto& who : r.names(*f[key], key)) map[who].push_back(index);
        anyone = true;
      };
      index_by("users", p.grants_by_user);
      index_by("accounts", p.grants_by_account);
      index_by("groups", p.grants_by_group);
      if (!anyone) r.fail(*item, "a grant to nobody", "users:, groups: and/or accounts:");
      p.grants.push_back(std::move(g));
    }
    p.has_group_grants = !p.grants_by_group.empty();
  }

  void gpu(const Node& n) {
    auto f = r.fields(n, "gpu", {"max_per_job", "default_max_per_job", "gpus_per_task_divide_node"});
    if (f.count("max_per_job") != 0) gpu_limits(*f["max_per_job"]);
    if (f.count("default_max_per_job") != 0) p.default_max_gpus = r.count(*f["default_max_per_job"], "default_max_per_job");
    if (f.count("gpus_per_task_divide_node") != 0)
      p.gpus_per_task_divide_node = r.boolean(*f["gpus_per_task_divide_node"], "gpus_per_task_divide_node");
  }

  void gpu_limits(const Node& n) {
    r.expect(n, Node::Kind::mapping, "max_per_job");
    for (const auto& [k, v] : n.pairs) {
      const std::string& account = r.name(*k, "account");
      p.max_gpus_by_account[account] = r.count(*v, "max_per_job for account " + account);
    }
  }

  void rules(const Node& n) {
    auto f = r.fields(n, "rules", {"residency", "access", "gpu", "locality"});
    if (f.count("residency") != 0) p.residency = r.mode(*f["residency"], "residency");
    if (f.count("access") != 0) p.access = r.mode(*f["access"], "access");
    if (f.count("gpu") != 0) p.gpu = r.mode(*f["gpu"], "gpu");
    if (f.count("locality") != 0) {
      const std::string& s = r.scalar(*f["locality"], "locality");
      if (s == "enforce") p.locality = LocalityMode::enforce;
      else if (s == "audit") p.locality = LocalityMode::audit;
      else if (s == "off") p.locality = LocalityMode::off;
      else r.fail(*f["locality"], "bad mode '" + s + "' for locality", "enforce, audit or off");
    }
  }
};

// The canonical text of the compiled policy, hashed into its revision: the same rules
// give the same revision whatever the YAML's layout, comments or key order.
std::string canonical(const Policy::Impl& p) {
  json::Writer w;
  w.begin_object().key("v").value(p.schema_version);
  w.key("unknown").value(static_cast<int>(p.unknown)).key("modes").begin_array();
  w.value(static_cast<int>(p.residency)).value(static_cast<int>(p.access)).value(static_cast<int>(p.gpu));
  w.value(static_cast<int>(p.locality)).end_array();
  w.key("zones").begin_array();
  for (const auto& z : p.zones) w.begin_array().value(z.name).value(z.code).end_array();
  w.end_array().key("partitions").begin_array();
  for (const auto& x : p.partitions)
    w.begin_array().value(x.name).value(x.zone).strings(x.nodes).value(x.gpus_per_node).value(x.cpu_only)
        .value(x.is_default).end_array();
  w.end_array().key("nodes").begin_array();
  std::vector<std::pair<std::string, int>> nodes(p.node_zone.begin(), p.node_zone.end());
  std::sort(nodes.begin(), nodes.end());
  for (const auto& [node, zone] : nodes) w.begin_array().value(node).value(zone).end_array();
  w.end_array().key("storage").begin_array();
  for (const auto& s : p.storage)
    w.begin_array().value(s.name).value(s.zone).strings(s.mounts).strings(s.nodes).strings(s.features).end_array();
  w.end_array().key("classes").begin_array();
  for (const auto& c : p.classifications)
    w.begin_array().value(c.name).value(c.requires_grant).value(c.encrypt_checkpoints).value(c.encrypt_transit).end_array();
  w.end_array().key("datasets").begin_array();
  for (const auto& d : p.datasets) {
    w.begin_array().value(d.name).strings(d.versions).value(d.classification).value(d.restricted_zones).begin_array();
    for (bool b : d.zone_allowed) w.value(b);
    w.end_array().begin_array();
    for (int s : d.replicas) w.value(s);
    w.end_array().end_array();
  }
  w.end_array().key("grants").begin_array();
  const auto who = [&](const std::unordered_map<std::string, std::vector<int>>& map, std::size_t g) {
    std::vector<std::string> out;
    for (const auto& [name, list] : map)
      if (std::find(list.begin(), list.end(), static_cast<int>(g)) != list.end()) out.push_back(name);
    std::sort(out.begin(), out.end());
    return out;
  };
  for (std::size_t g = 0; g < p.grants.size(); ++g) {
    w.begin_array().strings(who(p.grants_by_user, g)).strings(who(p.grants_by_account, g));
    w.strings(who(p.grants_by_group, g)).strings(p.grants[g].dataset_globs).begin_array();
    for (int c : p.grants[g].classifications) w.value(c);
    w.end_array().end_array();
  }
  w.end_array().key("gpu").begin_array();
  std::vector<std::pair<std::string, std::uint32_t>> limits(p.max_gpus_by_account.begin(), p.max_gpus_by_account.end());
  std::sort(limits.begin(), limits.end());
  for (const auto& [account, max] : limits) w.begin_array().value(account).value(max).end_array();
  w.value(p.default_max_gpus).value(p.gpus_per_task_divide_node).end_array().end_object();
  return w.str();
}

}  // namespace

std::shared_ptr<const Policy> Policy::load_string(std::string_view text, const std::string& name,
                                                  const LoadLimits& limits) {
  const yaml::Document doc = yaml::Document::parse(text, name, limits);
  const Reader r(doc);
  auto impl = std::make_unique<Impl>();
  impl->source = name;
  auto f = r.fields(doc.root(), "the policy",
                    {"version", "unknown_datasets", "rules", "classifications", "zones", "partitions", "node_sets",
                     "storage", "datasets", "grants", "gpu"},
                    {"version", "zones", "partitions"});
  impl->schema_version = static_cast<int>(r.count(*f["version"], "version"));
  if (impl->schema_version != kSchemaVersion)
    r.fail(*f["version"], "unsupported schema version " + std::to_string(impl->schema_version),
           "version: " + std::to_string(kSchemaVersion));
  Compiler c{r, *impl, {}, {}, {}, {}};
  if (f.count("unknown_datasets") != 0) {
    const std::string& s = r.scalar(*f["unknown_datasets"], "unknown_datasets");
    if (s == "deny") impl->unknown = UnknownDatasets::deny;
    else if (s == "audit") impl->unknown = UnknownDatasets::audit;
    else if (s == "allow") impl->unknown = UnknownDatasets::allow;
    else r.fail(*f["unknown_datasets"], "bad value '" + s + "' for unknown_datasets", "deny, audit or allow");
  }
  if (f.count("rules") != 0) c.rules(*f["rules"]);
  c.classifications(f.count("classifications") != 0 ? f["classifications"] : nullptr);
  c.zones(*f["zones"]);
  c.partitions(*f["partitions"]);
  if (f.count("node_sets") != 0) c.node_sets(*f["node_sets"]);
  if (f.count("storage") != 0) c.storage(*f["storage"]);
  if (f.count("datasets") != 0) c.datasets(*f["datasets"]);
  if (f.count("grants") != 0) c.grants(*f["grants"]);
  if (f.count("gpu") != 0) c.gpu(*f["gpu"]);
  impl->revision = saker::hash::sha256_hex(canonical(*impl));
  return std::make_shared<const Policy>(std::move(impl));
}

std::shared_ptr<const Policy> Policy::load_file(const std::string& path, const LoadLimits& limits) {
  if (std::error_code ec; std::filesystem::is_directory(path, ec))
    throw LoadError(path, 0, 0, "it is a directory, not the policy file", "the policy file itself (saker-policy.yaml(5))");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw LoadError(path, 0, 0, "cannot open the policy file", "a readable file (check the path and permissions)");
  // Read at most one byte past the limit: a huge file is refused without reading it all.
  std::string text(limits.max_bytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (in.bad()) throw LoadError(path, 0, 0, "cannot read the policy file", "a readable file");
  return load_string(text, path, limits);
}

}  // namespace saker::policy
