// job_submit_saker.so's helpers: its configuration file and the job request it builds.
#include <catch2/catch.hpp>

#include <cstring>

#include "plugins/job_submit/config.hpp"
#include "plugins/job_submit/request.hpp"

using namespace saker::job_submit;

TEST_CASE("the configuration sits beside slurm.conf", "[job_submit]") {
  CHECK(config_path("/x/etc/slurm.conf") == "/x/etc/job_submit_saker.conf");
  CHECK(config_path(nullptr) == "/etc/slurm/job_submit_saker.conf");
  CHECK(config_path("") == "/etc/slurm/job_submit_saker.conf");
}

TEST_CASE("configuration keys are checked", "[job_submit]") {
  std::vector<std::string> errors;
  auto c = parse_config("# c\npolicy=/p.yaml\naudit = /var/log/a.log\nreload_interval=5\n", "/e/j.conf", errors);
  CHECK(errors.empty());
  CHECK(c.policy == "/p.yaml");
  CHECK(c.audit == "/var/log/a.log");
  CHECK(c.reload_interval_ms == 5000);
  c = parse_config("policy=/p.yaml\n", "/e/j.conf", errors);
  CHECK(c.audit == "/e/saker-audit.log");
  parse_config("policy=/p.yaml\npolcy=/q\n", "/e/j.conf", errors);
  REQUIRE(errors.size() == 1);
  CHECK(errors[0] == "/e/j.conf:2: unknown key 'polcy'; accepted keys: policy, audit, audit_key, reload_interval, max_policy_bytes");
  errors.clear();
  parse_config("policy=relative.yaml\nreload_interval=0\njunk\n", "/e/j.conf", errors);
  CHECK(errors.size() == 3);
  errors.clear();
  parse_config("", "/e/j.conf", errors);
  CHECK(errors.size() == 1);
  errors.clear();
  c = parse_config("policy=/p.yaml\naudit_key=/etc/slurm/audit.key\nmax_policy_bytes=65536\n", "/e/j.conf", errors);
  CHECK(errors.empty());
  CHECK(c.audit_key == "/etc/slurm/audit.key");
  CHECK(c.max_policy_bytes == 65536);
  parse_config("policy=/p.yaml\naudit_key=key\nmax_policy_bytes=0\nmax_policy_bytes=4MiB\n", "/e/j.conf", errors);
  CHECK(errors.size() == 3);
}

TEST_CASE("GPU counts from 22.05 TRES strings", "[job_submit]") {
  CHECK(gpus_in_tres(nullptr) == 0);
  CHECK(gpus_in_tres("gres:gpu:4") == 4);
  CHECK(gpus_in_tres("gres/gpu:a100:2") == 2);
  CHECK(gpus_in_tres("gres:gpu=3") == 3);
  CHECK(gpus_in_tres("gres:gpu") == 1);
  CHECK(gpus_in_tres("gres:gpumem:4,gres:gpu:1") == 1);
  CHECK(gpus_in_tres("cpu:4;gres/gpu:2") == 2);
}

TEST_CASE("a job request from job_desc", "[job_submit]") {
  job_desc_msg_t job;
  slurm_init_job_desc_msg(&job);
  char env0[] = "FOO=1";
  char env1[] = "SAKER_DATASETS=patients@v3";
  char* env[] = {env0, env1};
  job.spank_job_env = env;
  job.spank_job_env_size = 2;
  char part[] = "gpu-ae";
  char tres[] = "gres:gpu:1";
  job.partition = part;
  job.tres_per_task = tres;
  job.num_tasks = 4;
  const auto q = request_from(job, 0);
  CHECK(q.user == "root");
  CHECK(q.partition == "gpu-ae");
  CHECK(q.gpus_per_task == 1);
  CHECK(q.gpus == 4);
  REQUIRE(q.datasets.size() == 1);
  CHECK(q.datasets[0].str() == "patients@v3");
}
