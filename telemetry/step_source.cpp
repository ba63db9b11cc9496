#include "telemetry/step_source.hpp"

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <vector>

namespace saker::telemetry {
namespace {

constexpr std::uint64_t kNoLimit = 1ull << 62;  // v1 writes ~2^63 for "unlimited"

bool is_pid(const char* name) {
  if (*name == '\0') return false;
  for (const char* p = name; *p; ++p)
    if (*p < '0' || *p > '9') return false;
  return true;
}

}  // namespace

std::optional<std::string> slurm_step_cgroup(std::string_view path) {
  std::size_t pos = 0;
  while (pos < path.size()) {
    auto slash = path.find('/', pos + 1);
    auto comp = path.substr(pos + 1, slash == std::string_view::npos ? std::string_view::npos : slash - pos - 1);
    if (comp.starts_with("step_")) return std::string(path.substr(0, slash == std::string_view::npos ? path.size() : slash));
    if (slash == std::string_view::npos) break;
    pos = slash;
  }
  return std::nullopt;
}

StepSource::StepSource(pid_t stepd, std::string proc_root, std::string cgroup_root)
    : stepd_(stepd), proc_root_(std::move(proc_root)), cgroup_root_(std::move(cgroup_root)),
      ticks_per_second_(::sysconf(_SC_CLK_TCK) > 0 ? ::sysconf(_SC_CLK_TCK) : 100) {
  auto cg = read_small_file(proc_root_ + "/" + std::to_string(stepd_) + "/cgroup");
  if (!cg) return;
  if (::access((cgroup_root_ + "/cgroup.controllers").c_str(), F_OK) == 0) {
    if (auto p = cgroup_path_of(*cg, ""))
      if (auto step = slurm_step_cgroup(*p)) {
        kind_ = "cgroup-v2";
        cpu_dir_ = mem_dir_ = io_dir_ = cgroup_root_ + *step;
      }
    return;
  }
  auto cpu = cgroup_path_of(*cg, "cpuacct");
  auto mem = cgroup_path_of(*cg, "memory");
  std::optional<std::string> cpu_step = cpu ? slurm_step_cgroup(*cpu) : std::nullopt;
  std::optional<std::string> mem_step = mem ? slurm_step_cgroup(*mem) : std::nullopt;
  // Both must be the step's own: a site constraining memory but not accounting CPU
  // (or neither) is read from the process tree.
  if (cpu_step && mem_step) {
    kind_ = "cgroup-v1";
    const std::string cpu_mount = ::access((cgroup_root_ + "/cpuacct").c_str(), F_OK) == 0 ? "/cpuacct" : "/cpu,cpuacct";
    cpu_dir_ = cgroup_root_ + cpu_mount + *cpu_step;
    mem_dir_ = cgroup_root_ + "/memory" + *mem_step;
    if (auto io = cgroup_path_of(*cg, "blkio"); io && slurm_step_cgroup(*io))
      io_dir_ = cgroup_root_ + "/blkio" + *slurm_step_cgroup(*io);
  }
}

std::optional<StepUsage> StepSource::read() const { return kind_ == "proc" ? read_proc() : read_cgroup(); }

std::optional<StepUsage> StepSource::read_cgroup() const {
  StepUsage u;
  if (kind_ == "cgroup-v2") {
    auto stat = read_small_file(cpu_dir_ + "/cpu.stat");
    if (!stat) return std::nullopt;
    auto usec = parse_keyed_number(*stat, "usage_usec");
    if (!usec) return std::nullopt;
    u.cpu_seconds = static_cast<double>(*usec) / 1e6;
    if (auto t = read_small_file(mem_dir_ + "/memory.current")) u.rss = parse_single_number(*t).value_or(0);
    // memory.peak exists from Linux 5.19; before that the samples' maximum is what is known.
    if (auto t = read_small_file(mem_dir_ + "/memory.peak")) u.rss_hwm = parse_single_number(*t).value_or(0);
    if (auto t = read_small_file(mem_dir_ + "/memory.max")) u.mem_limit = parse_single_number(*t).value_or(0);
    if (auto t = read_small_file(io_dir_ + "/io.stat")) u.io = parse_io_stat_v2(*t).value_or(IoBytes{});
  } else {
    auto ns = read_small_file(cpu_dir_ + "/cpuacct.usage");
    auto v = ns ? parse_single_number(*ns) : std::nullopt;
    if (!v) return std::nullopt;
    u.cpu_seconds = static_cast<double>(*v) / 1e9;
    if (auto t = read_small_file(mem_dir_ + "/memory.usage_in_bytes")) u.rss = parse_single_number(*t).value_or(0);
    if (auto t = read_small_file(mem_dir_ + "/memory.max_usage_in_bytes")) u.rss_hwm = parse_single_number(*t).value_or(0);
    if (auto t = read_small_file(mem_dir_ + "/memory.limit_in_bytes")) u.mem_limit = parse_single_number(*t).value_or(0);
    if (!io_dir_.empty())
      if (auto t = read_small_file(io_dir_ + "/blkio.throttle.io_service_bytes")) u.io = parse_blkio_v1(*t).value_or(IoBytes{});
  }
  if (u.mem_limit >= kNoLimit) u.mem_limit = 0;
  u.rss_hwm = std::max(u.rss_hwm, u.rss);
  return u;
}

// The step's processes and their stat lines. Where the kernel lists each thread's
// children (/proc/PID/task/TID/children, CONFIG_PROC_CHILDREN) only the step's own
// processes are read; otherwise every process of the node is, to find the tree.
std::optional<std::map<pid_t, ProcStat>> StepSource::step_processes() const {
  std::map<pid_t, ProcStat> out;
  auto stat_of = [&](pid_t pid) -> std::optional<ProcStat> {
    auto text = read_small_file(proc_root_ + "/" + std::to_string(pid) + "/stat");
    return text ? parse_proc_stat(*text) : std::nullopt;  // nullopt: exited meanwhile
  };
  auto root = stat_of(stepd_);
  if (!root) return std::nullopt;
  out[stepd_] = *root;
  // Children lists, thread by thread; nullopt when the kernel has none.
  auto listed_children = [&](pid_t pid) -> std::optional<std::vector<pid_t>> {
    const std::string tasks = proc_root_ + "/" + std::to_string(pid) + "/task";
    DIR* d = ::opendir(tasks.c_str());
    if (d == nullptr) return std::nullopt;
    std::vector<pid_t> kids;
    while (const dirent* e = ::readdir(d)) {
      if (!is_pid(e->d_name)) continue;
      auto text = read_small_file(tasks + "/" + e->d_name + "/children");
      if (!text) continue;  // the thread exited meanwhile
      const char* p = text->c_str();
      while (*p) {
        char* end = nullptr;
        const long v = std::strtol(p, &end, 10);
        if (end == p) break;
        if (v > 0) kids.push_back(static_cast<pid_t>(v));
        p = end;
      }
    }
    ::closedir(d);
    return kids;
  };
  const std::string probe = proc_root_ + "/" + std::to_string(stepd_) + "/task/" + std::to_string(stepd_) + "/children";
  if (::access(probe.c_str(), R_OK) == 0) {
    auto first = listed_children(stepd_);
    std::vector<pid_t> todo = *first;
    while (!todo.empty() && out.size() < 100000) {
      const pid_t pid = todo.back();
      todo.pop_back();
      if (out.count(pid)) continue;
      auto s = stat_of(pid);
      if (!s) continue;
      out[pid] = *s;
      if (auto more = listed_children(pid)) todo.insert(todo.end(), more->begin(), more->end());
    }
    return out;
  }
  // One pass over /proc: parents of every process, then the tree below slurmstepd.
  std::map<pid_t, std::vector<pid_t>> children;
  std::map<pid_t, ProcStat> all;
  DIR* d = ::opendir(proc_root_.c_str());
  if (d == nullptr) return std::nullopt;
  while (const dirent* e = ::readdir(d)) {
    if (!is_pid(e->d_name)) continue;
    const pid_t pid = static_cast<pid_t>(std::strtol(e->d_name, nullptr, 10));
    auto s = stat_of(pid);
    if (!s) continue;
    all[pid] = *s;
    children[s->ppid].push_back(pid);
  }
  ::closedir(d);
  std::vector<pid_t> todo = children[stepd_];
  while (!todo.empty()) {
    const pid_t pid = todo.back();
    todo.pop_back();
    if (out.count(pid) || !all.count(pid)) continue;
    out[pid] = all[pid];
    for (pid_t c : children[pid]) todo.push_back(c);
  }
  return out;
}

std::optional<StepUsage> StepSource::read_proc() const {
  auto procs = step_processes();
  if (!procs) return std::nullopt;
  const ProcStat root = procs->at(stepd_);
  StepUsage u;
  std::uint64_t ticks = root.cutime + root.cstime;
  if (auto io = read_small_file(proc_root_ + "/" + std::to_string(stepd_) + "/io"))
    if (auto b = parse_proc_io(*io)) u.io = *b;
  const pid_t self = ::getpid();
  for (const auto& [pid, s] : *procs) {
    if (pid == stepd_ || pid == self) continue;
    ticks += s.utime + s.stime + s.cutime + s.cstime;
    ++u.processes;
    const std::string dir = proc_root_ + "/" + std::to_string(pid);
    if (auto st = read_small_file(dir + "/status"))
      if (auto m = parse_proc_status(*st)) {
        u.rss += m->rss;
        u.rss_hwm = std::max(u.rss_hwm, m->hwm);
      }
    if (auto io = read_small_file(dir + "/io"))
      if (auto b = parse_proc_io(*io)) {
        u.io.read += b->read;
        u.io.write += b->write;
      }
  }
  u.cpu_seconds = static_cast<double>(ticks) / static_cast<double>(ticks_per_second_);
  u.rss_hwm = std::max(u.rss_hwm, u.rss);
  return u;
}

}  // namespace saker::telemetry
