// The compiled policy: plain immutable data with indexes for the questions asked at
// submit and launch time. Built once by the loader (loader.cpp), read by engine.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "saker/policy.hpp"

namespace saker::policy {

enum class UnknownDatasets { deny, audit, allow };
enum class LocalityMode { enforce, audit, off };

struct Zone {
  std::string name;
  std::string code;  // country or region code, e.g. AE, DE, EU
};

struct Partition {
  std::string name;
  int zone = -1;
  std::vector<std::string> nodes;
  std::uint32_t gpus_per_node = 0;  // 0: not declared
  bool cpu_only = false;
  bool is_default = false;
};

struct Storage {
  std::string name;
  int zone = -1;
  std::vector<std::string> mounts;  // absolute, normalised, no trailing '/'
  std::vector<std::string> nodes;
  std::vector<std::string> features;
};

struct Classification {
  std::string name;
  bool requires_grant = false;
  bool encrypt_checkpoints = false;
  // transit: encrypt: the job's traffic between nodes must be sealed (saker-comm(3)).
  bool encrypt_transit = false;
};

struct Dataset {
  std::string name;
  std::vector<std::string> versions;  // empty: any version
  int classification = -1;
  bool restricted_zones = false;      // false: may be processed anywhere
  std::vector<bool> zone_allowed;     // indexed by zone, meaningful when restricted_zones
  std::vector<int> replicas;          // storage indexes
};

struct Grant {
  std::vector<std::string> dataset_globs;
  std::vector<int> classifications;
};

struct Policy::Impl {
  std::string source;
  std::string revision;
  int schema_version = 0;

  UnknownDatasets unknown = UnknownDatasets::deny;
  Mode residency = Mode::enforce;
  Mode access = Mode::enforce;
  Mode gpu = Mode::enforce;
  LocalityMode locality = LocalityMode::enforce;

  std::vector<Zone> zones;
  std::vector<Partition> partitions;
  std::size_t node_sets = 0;
  std::vector<Storage> storage;
  std::vector<Classification> classifications;
  std::vector<Dataset> datasets;
  std::vector<Grant> grants;

  // GPU rules.
  std::unordered_map<std::string, std::uint32_t> max_gpus_by_account;
  std::uint32_t default_max_gpus = 0;  // 0: no limit
  bool gpus_per_task_divide_node = true;

  // Indexes.
  std::unordered_map<std::string, int> dataset_index;
  std::unordered_map<std::string, int> partition_index;
  std::unordered_map<std::string, int> node_zone;
  std::unordered_map<std::string, std::vector<int>> grants_by_user, grants_by_account, grants_by_group;
  bool has_group_grants = false;
  int default_partition = -1;

  int find_dataset(std::string_view name) const;
  int find_partition(std::string_view name) const;
};

// Matching of dataset-name globs (*, ?, [...]); validate_glob returns "" or the problem.
std::string validate_glob(std::string_view glob);
bool glob_match(const std::string& glob, const std::string& name);

}  // namespace saker::policy
