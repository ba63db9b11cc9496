// spank_saker.so's plugstack.conf arguments (`required spank_saker.so key=value ...`).
// Unknown keys are errors, as in pyxis: a typo must not silently disable a check.
#pragma once

#include <string>
#include <vector>

#include "plugins/affinity/omp_bind.hpp"
#include "plugins/spank/telemetry_config.hpp"

namespace saker::spank {

// What the remote context does with GPU/CPU/memory/NIC affinity (--gpu-affinity).
enum class AffinityMode {
  automatic,  // plan and apply
  none,       // leave the task as Slurm launched it
  explain,    // plan, apply, and print the plan on the task's stderr
};

struct Config {
  std::string policy_path;  // policy=FILE: the site policy, for the launch-time residency check
  AffinityMode affinity = AffinityMode::automatic;  // gpu-affinity=MODE: default when the user gives none
  // omp-bind=none|close|spread: default for --omp-bind (none: OMP_NUM_THREADS only, no
  // OMP_PLACES/OMP_PROC_BIND; plugins/affinity/omp_bind.hpp says why)
  affinity::OmpBind omp_bind = affinity::OmpBind::none;
  std::string topology_path;  // topology=FILE: hwloc XML (a test topology, or where to cache the live one)
  bool strict = false;        // strict: a topology or plan failure fails the task instead of running unbound
  // state-dir=DIR: root-only directory on each node for the job records the job prolog
  // writes and the launch audit log (DIR/NODE/...; see node_record.hpp).
  std::string state_dir = "/var/spool/saker";
  TelemetryConfig telemetry;  // telemetry*= keys (telemetry_config.hpp)
  // Job attestation (attestation_hook.hpp). attest-key=FILE: the site's Ed25519 private key
  // (root-only); empty: no attestation. attest-dir=DIR: where each step's signed attestation
  // is written for its tasks (DIR/NODE/, traversable, not listable). attest-audit-log=FILE:
  // the audit log whose sealed head the attestation states (default: the node's launch
  // audit log under state-dir).
  std::string attest_key;
  std::string attest_dir = "/var/spool/saker-attest";
  std::string attest_audit_log;
  // OpenLineage RunEvents (lineage_hook.hpp). openlineage-dir=DIR: where each step's START
  // and COMPLETE/FAIL events are written (root's, not group- or world-writable; files 0640,
  // group DIR's); empty: none. openlineage-namespace=NAME: the job namespace (the site's
  // name for this cluster).
  std::string openlineage_dir;
  std::string openlineage_namespace = "slurm";
};

// Parses the plugstack arguments. Throws saker::Error naming the bad argument and
// listing the accepted keys.
Config parse_config(const std::vector<std::string>& args);

// "auto" | "none" | "explain"; throws saker::Error naming `where` otherwise.
AffinityMode parse_affinity_mode(const std::string& text, const std::string& where);

}  // namespace saker::spank
