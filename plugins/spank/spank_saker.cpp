// spank_saker.so: Saker's SPANK plugin. One function per SPANK context, each a few
// lines over the libraries (model: NVIDIA pyxis).
//
// Allocator/local context (sbatch, salloc, srun on the login node): the --dataset
// option is parsed and recorded in the job's control environment, where slurmctld's
// job_submit/saker reads it.
//
// Local context (srun) also gives the step's tasks a fresh SAKER_JOB_KEY unless one is set
// (job_key.hpp).
//
// Remote context (slurmstepd): the node's topology is loaded once per step and each
// task is bound to its GPU, cores, NUMA node and NICs (affinity_step.hpp); with
// attest-key=, the step's attestation is signed and handed to its tasks
// (attestation_hook.hpp); with openlineage-dir=, its OpenLineage START and COMPLETE/FAIL
// events are written (lineage_hook.hpp).
#include <string>
#include <vector>

extern "C" {
#include <slurm/spank.h>  // spank.h declares some symbols outside extern "C"
}

#include "common/error.hpp"
#include "common/log.hpp"
#include "common/version.hpp"
#include "plugins/c_boundary.hpp"
#include "plugins/spank/affinity_step.hpp"
#include "plugins/spank/attestation_hook.hpp"
#include "plugins/spank/config.hpp"
#include "plugins/spank/job_key.hpp"
#include "plugins/spank/lineage_hook.hpp"
#include "plugins/spank/residency_hook.hpp"
#include "plugins/spank/telemetry_hook.hpp"
#include "policies/dataset_ref.hpp"

// SPANK_PLUGIN defines const arrays; in C++ they would get internal linkage and
// Slurm would refuse the plugin ("symbol missing"), so declare them extern "C" first.
extern "C" {
extern const char plugin_name[];
extern const char plugin_type[];
extern const unsigned int plugin_version;
extern const unsigned int spank_plugin_version;
}
SPANK_PLUGIN(saker, 1)

namespace {

using saker::policy::DatasetRef;

struct State {
  saker::spank::Config config;
  std::vector<DatasetRef> datasets;
  bool datasets_given = false;
};
State g_state;

int on_dataset_option(int /*val*/, const char* optarg, int /*remote*/) {
  return saker::plugin::guarded("--dataset", -1, [&] {
    try {
      g_state.datasets = saker::policy::parse_dataset_list(optarg == nullptr ? "" : optarg);
      g_state.datasets_given = true;
      return 0;
    } catch (const saker::Error& e) {
      // In sbatch/srun slurm_error prints to the user's terminal; non-zero aborts the command.
      slurm_error("saker: %s", e.what());
      return -1;
    }
  });
}

struct spank_option g_dataset_option = {
    const_cast<char*>("dataset"),
    const_cast<char*>("NAME[@VERSION][,...]"),
    const_cast<char*>("Datasets this job reads; the site's data-residency policy places or refuses the job "
                      "accordingly (Saker)."),
    1, 0, on_dataset_option};

std::vector<std::string> plugin_args(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 0; i < argc; ++i) args.emplace_back(argv[i]);
  return args;
}

// Allocator (sbatch/salloc) and local (srun) contexts: record the declared datasets
// in the job's control environment so slurmctld sees them.
int record_datasets(spank_t sp) {
  if (!g_state.datasets_given) return 0;
  const std::string canonical = saker::policy::format_dataset_list(g_state.datasets);
  if (spank_job_control_setenv(sp, saker::policy::kDatasetsEnvName, canonical.c_str(), 1) != ESPANK_SUCCESS) {
    slurm_error("saker: could not record --dataset=%s in the job's control environment", canonical.c_str());
    return -1;
  }
  return 0;
}

// Local context (srun): the step's tasks get a job key of their own (job_key.hpp), unless
// saker-run or the user gave one. Without a key the ranks could not authenticate each
// other: srun refuses to start the step rather than start it open.
int give_step_a_key() {
  const std::string why = saker::spank::ensure_step_job_key();
  if (why.empty()) return 0;
  slurm_error("saker: cannot make this step's job key (SAKER_JOB_KEY): %s; set SAKER_JOB_KEY_FILE to a 0600 file "
              "of yours holding 64 hex digits, or report this to your administrators", why.c_str());
  return -1;
}

// Remote context: hands the site policy's path to the task as SAKER_POLICY, so tools
// such as saker-train apply the site's checkpoint rule without every user passing
// --policy. The site's path overwrites anything the user exported.
int export_policy_path(spank_t sp) {
  const std::string& path = g_state.config.policy_path;
  if (path.empty()) return 0;
  if (spank_setenv(sp, "SAKER_POLICY", path.c_str(), 1) != ESPANK_SUCCESS) {
    slurm_error("saker: could not set SAKER_POLICY in the task environment");
    return -1;
  }
  return 0;
}

}  // namespace

extern "C" int slurm_spank_init(spank_t sp, int argc, char** argv) {
  return saker::plugin::guarded("slurm_spank_init", -1, [&] {
    // In srun, before it parses its options: so that --export=NONE,SAKER_JOB_KEY finds the key.
    if (spank_context() == S_CTX_LOCAL && give_step_a_key() != 0) return -1;
    if (spank_context() == S_CTX_REMOTE) {
      saker::plugin::log_to_slurm();
      // Once per step in slurmd's log (verbose level): which Saker the node runs.
      slurm_verbose("saker: %s", saker::version_line("spank_saker.so").c_str());
    }
    try {
      g_state.config = saker::spank::parse_config(plugin_args(argc, argv));
    } catch (const saker::Error& e) {
      slurm_error("saker: %s", e.what());
      return -1;
    }
    if (spank_option_register(sp, &g_dataset_option) != ESPANK_SUCCESS) {
      slurm_error("saker: could not register the --dataset option");
      return -1;
    }
    return saker::spank::affinity_register_option(sp);
  });
}

extern "C" int slurm_spank_init_post_opt(spank_t sp, int /*argc*/, char** /*argv*/) {
  return saker::plugin::guarded("slurm_spank_init_post_opt", -1, [&] {
    switch (spank_context()) {
      case S_CTX_ALLOCATOR:
      case S_CTX_LOCAL:
        return record_datasets(sp);
      case S_CTX_REMOTE:
        saker::spank::residency_prepare(sp, g_state.config, g_state.datasets);
        saker::spank::attest_step(sp, g_state.config);
        saker::spank::lineage_step_start(sp, g_state.config);
        saker::spank::telemetry_start(sp, g_state.config);
        return saker::spank::affinity_prepare_step(sp, g_state.config);
      default:
        return 0;
    }
  });
}

// Job prolog and epilog (slurmd, as root): the node's record of the job, which task
// starts on this node read instead of asking slurmctld (node_record.hpp).
extern "C" int slurm_spank_job_prolog(spank_t /*sp*/, int argc, char** argv) {
  return saker::plugin::guarded("slurm_spank_job_prolog", 0, [&] {
    saker::plugin::log_to_slurm();
    saker::spank::Config config;
    try {
      config = saker::spank::parse_config(plugin_args(argc, argv));
    } catch (const saker::Error& e) {
      slurm_error("saker: %s", e.what());
      return 0;
    }
    return saker::spank::residency_record_job(config);
  });
}

extern "C" int slurm_spank_job_epilog(spank_t /*sp*/, int argc, char** argv) {
  return saker::plugin::guarded("slurm_spank_job_epilog", 0, [&] {
    try {
      const saker::spank::Config config = saker::spank::parse_config(plugin_args(argc, argv));
      saker::spank::attest_forget_job(config);
      return saker::spank::residency_forget_job(config);
    } catch (const saker::Error&) {
      return 0;
    }
  });
}

// Remote context, in each task just before exec: first the residency re-check (a
// refusal fails the task, closed), then the task's affinity plan.
extern "C" int slurm_spank_task_init(spank_t sp, int /*argc*/, char** /*argv*/) {
  return saker::plugin::guarded("slurm_spank_task_init", -1, [&] {
    if (const int rc = saker::spank::residency_enforce(sp); rc != 0) return rc;
    if (const int rc = export_policy_path(sp); rc != 0) return rc;
    saker::spank::attest_task_init(sp);
    saker::spank::telemetry_task_init(sp);
    return saker::spank::affinity_task_init(sp, g_state.config);
  });
}

// Remote context (slurmstepd): telemetry's sampler stops after the node's last task
// (telemetry_hook.hpp); slurm_spank_exit is its backstop and writes the step's OpenLineage
// end event, once every task's exit status is known.
extern "C" int slurm_spank_task_exit(spank_t sp, int /*argc*/, char** /*argv*/) {
  return saker::plugin::guarded("slurm_spank_task_exit", 0, [&] {
    saker::spank::lineage_task_exit(sp);
    return saker::spank::telemetry_task_exit(sp);
  });
}

extern "C" int slurm_spank_exit(spank_t sp, int /*argc*/, char** /*argv*/) {
  return saker::plugin::guarded("slurm_spank_exit", 0, [&] {
    // The step's end event first: its checkpoint listing is bounded (lineage_hook.hpp).
    if (spank_context() == S_CTX_REMOTE) saker::spank::lineage_step_end();
    return saker::spank::telemetry_exit(sp);
  });
}
