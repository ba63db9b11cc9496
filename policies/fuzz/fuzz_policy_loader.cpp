// libFuzzer target for the policy loader (`make fuzz`, then
// ./policies/fuzz/fuzz_policy_loader tests/data/policy/). Any input must either load or
// throw saker::Error (LoadError): never crash, hang or leak.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "saker/policy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto p = saker::policy::Policy::load_string(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
    saker::policy::JobRequest q;
    q.user = "u";
    q.datasets = saker::policy::parse_dataset_list("a,b@1");
    (void)p->evaluate(q);
    (void)p->check_launch("n1", q.datasets);
    saker::policy::Identity who;
    who.user = "u";
    who.account = "a";
    who.groups = {"g"};
    (void)p->check_launch_access("n1", q.datasets, who);
  } catch (const saker::Error&) {
  }
  return 0;
}

// libslurm's hostlist parser leaks a few bytes on some malformed ranges ("n[5-2]");
// that is Slurm's, not the loader's, so LeakSanitizer is told to ignore it.
extern "C" const char* __lsan_default_suppressions() { return "leak:libslurm.so\n"; }
