// libFuzzer target: what users and operators can put in a job's fields, through the
// parsers and decisions of job_submit_saker.so (`make fuzz`, needs clang++).
// The input is split on '\n' into: admin_comment, job id text, dataset list, partition,
// features, account. Properties checked besides "no crash, no sanitizer report":
//  - the marker round-trips: with_marker(x, ds) reads back as exactly ds;
//  - a malformed marker never reads as datasets;
//  - a parsed job id prints back to the same id;
//  - a decision never both refuses and sets fields, and an update of a job with datasets
//    that names no partition never sets one.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "plugins/common/dataset_marker.hpp"
#include "plugins/common/job_ref.hpp"
#include "plugins/job_submit/decide.hpp"

using namespace saker;

namespace {

const job_submit::PolicyView& view() {
  static const job_submit::PolicyView v{policy::Policy::load_file(SAKER_FUZZ_POLICY), ""};
  return v;
}

// Slurm's fields are C strings: a field ends at its first NUL.
std::vector<std::string> split(const std::string& s, std::size_t n) {
  std::vector<std::string> out(n);
  std::size_t start = 0;
  for (std::size_t i = 0; i < n && start <= s.size(); ++i) {
    const std::size_t end = i + 1 == n ? s.size() : std::min(s.find('\n', start), s.size());
    out[i] = s.substr(start, end - start);
    out[i] = out[i].c_str();
    start = end + 1;
  }
  return out;
}

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const auto f = split(input, 6);
  const std::string& admin = f[0];

  const plugins::MarkerRead read = plugins::read_marker(admin.c_str());
  if (read.state != plugins::MarkerRead::State::present) check(read.datasets.empty());
  if (read.state == plugins::MarkerRead::State::present) {
    const std::string again = plugins::with_marker(admin, read.datasets);
    const plugins::MarkerRead back = plugins::read_marker(again.c_str());
    check(back.state == plugins::MarkerRead::State::present && back.datasets == read.datasets);
  }

  const auto ref = plugins::parse_job_ref(f[1]);
  if (ref) check(plugins::parse_job_ref(ref->str()) == ref);

  policy::JobRequest q;
  q.uid = 1000;
  q.user = "fuzz";
  q.partition = f[3];
  q.features = f[4];
  q.account = f[5];
  try {
    q.datasets = policy::parse_dataset_list(f[2]);
  } catch (const std::exception&) {
    q.datasets.clear();
  }
  const job_submit::Outcome s = job_submit::decide_submit(view(), q, admin.c_str());
  if (s.refuse) check(!s.set_partition && !s.set_features && !s.set_admin_comment);
  if (!s.refuse && !q.datasets.empty()) {
    check(s.set_admin_comment.has_value());
    check(plugins::read_marker(s.set_admin_comment->c_str()).datasets == q.datasets);
  }

  job_submit::Update u;
  u.ref_text = f[1];
  u.request = q;
  u.features_given = !f[4].empty();
  u.partition_given = false;
  u.facts.state = read.state == plugins::MarkerRead::State::malformed ? job_submit::JobFacts::State::malformed
                                                                       : job_submit::JobFacts::State::known;
  u.facts.datasets = read.datasets;
  u.facts.partition = f[3];
  const job_submit::Outcome m = job_submit::decide_modify(view(), u);
  if (m.refuse) check(!m.set_partition && !m.set_features && !m.set_admin_comment);
  if (!read.datasets.empty()) check(!m.set_partition);  // no partition named: never moved
  return 0;
}
