// saker-sample-step: the per-node, per-step sampler spank_saker.so starts (as root) when
// telemetry= is set in plugstack.conf. It samples the step every --interval seconds
// until SIGTERM (the plugin, when the step's last task exits) or until its slurmstepd is
// gone, then appends the node's summary to the job's record and writes the Prometheus
// file. Not meant to be run by hand; see spank_saker(8) and saker-telemetry(5).
//
// Exit codes: 0 the record was written, 1 it could not be, 2 bad usage.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <iostream>
#include <map>
#include <string>

#include "common/error.hpp"
#include "common/version.hpp"
#include "telemetry/counters_dir.hpp"
#include "telemetry/sampler.hpp"
#include "telemetry/store.hpp"

namespace tel = saker::telemetry;

namespace {

constexpr const char* kUsage =
    "Usage: saker-sample-step --job ID --step ID --node NAME --uid UID --stepd PID --record-dir DIR\n"
    "         [--user NAME] [--account NAME] [--tasks N] [--cpus N] [--interval SECONDS]\n"
    "         [--gpus LIST] [--counters-dir DIR] [--mem-limit BYTES] [--prometheus-dir DIR]\n"
    "         [--prometheus-keep SECONDS] [--operators-gid GID] [--nvml LIBRARY] [--start EPOCH]\n"
    "Started by spank_saker.so for each step (telemetry= in plugstack.conf); see spank_saker(8).\n";

double now_epoch() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double process_cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}


std::vector<unsigned> parse_gpus(const std::string& list) {
  std::vector<unsigned> out;
  std::size_t i = 0;
  while (i < list.size()) {
    std::size_t used = 0;
    const unsigned long v = std::stoul(list.substr(i), &used);
    if (used == 0 || v > 4095) throw std::invalid_argument(list);
    out.push_back(static_cast<unsigned>(v));
    i += used;
    if (i < list.size() && list[i++] != ',') throw std::invalid_argument(list);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (saker::print_version_if_asked(argc, argv, "saker-sample-step")) return 0;
  std::map<std::string, std::string> a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--help" || k == "-h") { std::cout << kUsage; return 0; }
    if (!k.starts_with("--") || i + 1 >= argc) { std::cerr << "saker-sample-step: bad argument '" << k << "'\n" << kUsage; return 2; }
    a[k.substr(2)] = argv[++i];
  }
  tel::SamplerConfig c;
  std::string record_dir, prom_dir;
  double keep = 3600;
  gid_t operators = 0;
  try {
    for (const char* need : {"job", "step", "node", "uid", "stepd", "record-dir"})
      if (!a.count(need)) throw std::invalid_argument(std::string("--") + need + " is required");
    c.info.job = a["job"];
    c.info.step = a["step"];
    c.info.node = a["node"];
    c.info.user = a["user"];
    c.info.account = a["account"];
    c.info.uid = static_cast<std::uint32_t>(std::stoul(a["uid"]));
    c.info.tasks = a.count("tasks") ? static_cast<std::uint32_t>(std::stoul(a["tasks"])) : 0;
    c.info.cpus = a.count("cpus") ? static_cast<std::uint32_t>(std::stoul(a["cpus"])) : 1;
    c.info.interval = a.count("interval") ? std::stod(a["interval"]) : 10.0;
    c.info.start = a.count("start") ? std::stod(a["start"]) : 0;
    if (!(c.info.interval >= 0.05 && c.info.interval <= 86400)) throw std::invalid_argument("--interval out of range");
    c.stepd = static_cast<pid_t>(std::stol(a["stepd"]));
    if (a.count("gpus")) c.gpus = parse_gpus(a["gpus"]);
    c.counters_dir = a["counters-dir"];
    c.mem_limit = a.count("mem-limit") ? std::stoull(a["mem-limit"]) : 0;
    if (a.count("nvml")) c.nvml_library = a["nvml"];
    record_dir = a["record-dir"];
    prom_dir = a["prometheus-dir"];
    if (a.count("prometheus-keep")) keep = std::stod(a["prometheus-keep"]);
    if (a.count("operators-gid")) operators = static_cast<gid_t>(std::stoul(a["operators-gid"]));
    tel::record_path(record_dir, c.info.job);  // validates the job id
  } catch (const std::exception& e) {
    std::cerr << "saker-sample-step: " << e.what() << "\n" << kUsage;
    return 2;
  }

  // SIGTERM/SIGINT/SIGHUP end the step's sampling; they are read from a signalfd so the
  // final write never runs inside a signal handler.
  sigset_t stop;
  sigemptyset(&stop);
  for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&stop, s);
  ::sigprocmask(SIG_BLOCK, &stop, nullptr);
  const int sfd = ::signalfd(-1, &stop, SFD_CLOEXEC);
  // The step's slurmstepd: when it is gone without telling us, the step is over.
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, c.stepd, 0));

  const double started = now_epoch();
  const double cpu_at_start = process_cpu_seconds();
  tel::StepSampler sampler(c);
  // Problems go into the record (stderr is slurmstepd's, which nobody reads).
  std::string prom_problem;
  auto write_prom = [&](const tel::NodeStepRecord& r, bool running) {
    if (prom_dir.empty()) return;
    try {
      tel::write_prometheus(prom_dir, r, running);
    } catch (const std::exception& e) {
      if (prom_problem.empty()) std::cerr << "saker-sample-step: " << e.what() << "\n";
      prom_problem = e.what();
    }
  };
  auto next = std::chrono::steady_clock::now();
  std::string stopped_by;  // what ended the sampling (NodeStepRecord's stopped_by)
  while (true) {
    const double now = now_epoch();
    sampler.sample(now);
    write_prom(sampler.summary(now), true);
    next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(c.info.interval));
    bool done = false;
    while (!done) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next - std::chrono::steady_clock::now()).count();
      if (left <= 0) break;
      pollfd fds[2] = {{sfd, POLLIN, 0}, {pidfd, POLLIN, 0}};
      const int n = ::poll(fds, pidfd >= 0 ? 2 : 1, static_cast<int>(std::min<long long>(left, 60000)));
      if (n < 0 && errno != EINTR) {
        done = true;
        stopped_by = "error";
      }
      if (n > 0) {
        done = true;
        stopped_by = "stepd-gone";
        signalfd_siginfo si{};
        if ((fds[0].revents & POLLIN) && ::read(sfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
          // spank_saker.so queues its signal from slurmstepd itself, with the reaped tasks'
          // peak resident size (KiB) as the value.
          const bool from_stepd = si.ssi_code == SI_QUEUE && si.ssi_pid == static_cast<std::uint32_t>(c.stepd);
          stopped_by = from_stepd ? "step-end" : "signal";
          if (si.ssi_code == SI_QUEUE && si.ssi_ptr < (1ull << 40)) sampler.note_exited_max_rss(si.ssi_ptr << 10);
        }
      }
      if (pidfd < 0 && ::kill(c.stepd, 0) != 0 && errno == ESRCH) {
        done = true;
        stopped_by = "stepd-gone";
      }
    }
    if (done) break;
  }

  // Step end: one last sample, the summary, the record, the Prometheus file.
  const auto t0 = std::chrono::steady_clock::now();
  const double end = now_epoch();
  sampler.sample(end);
  tel::NodeStepRecord r = sampler.summary(end);
  r.info.sampler_core_share = (process_cpu_seconds() - cpu_at_start) / std::max(1e-3, end - started);
  r.info.final_write_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  r.info.stopped_by = stopped_by;
  if (!prom_problem.empty()) r.info.note = "no Prometheus file: " + prom_problem;
  int rc = 0;
  try {
    std::string warning;
    tel::append_record(record_dir, c.info.job, tel::format_record(r), c.info.uid, operators, &warning);
    if (!warning.empty()) std::cerr << "saker-sample-step: " << warning << "\n";
  } catch (const std::exception& e) {
    std::cerr << "saker-sample-step: " << e.what() << "\n";
    rc = 1;
  }
  write_prom(r, false);
  if (!prom_dir.empty()) tel::prune_prometheus(prom_dir, c.info.node, keep);
  tel::remove_counters_dir(c.counters_dir);
  return rc;
}
