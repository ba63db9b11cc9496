#include "telemetry/store.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <ctime>

#include "common/error.hpp"

namespace saker::telemetry {
namespace {

std::string sys_error(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

// The kernel's POSIX ACL xattr (linux/posix_acl_xattr.h): version 2, then entries
// sorted by tag. Grants: owner rw, `reader` r, group r, mask r, other none.
bool grant_read(int fd, uid_t reader) {
  struct Entry {
    std::uint16_t tag, perm;
    std::uint32_t id;
  };
  constexpr std::uint32_t kUndefined = 0xffffffffu;
  struct {
    std::uint32_t version = 2;
    Entry e[5];
  } acl;
  acl.e[0] = {0x01, 6, kUndefined};  // ACL_USER_OBJ
  acl.e[1] = {0x02, 4, static_cast<std::uint32_t>(reader)};  // ACL_USER
  acl.e[2] = {0x04, 4, kUndefined};  // ACL_GROUP_OBJ
  acl.e[3] = {0x10, 4, kUndefined};  // ACL_MASK
  acl.e[4] = {0x20, 0, kUndefined};  // ACL_OTHER
  return ::fsetxattr(fd, "system.posix_acl_access", &acl, sizeof acl, 0) == 0;
}

void write_all(int fd, const std::string& data, const std::string& path) {
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(explain(sys_error("cannot write", path), "the disk is full or the file system failed", "free space there"));
    done += static_cast<std::size_t>(n);
  }
}

std::string prom_label(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

}  // namespace

void append_record(const std::string& dir, const std::string& job, const std::string& block, uid_t owner,
                   gid_t operators, std::string* warning) {
  const std::string path = record_path(dir, job);
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    throw Error(explain(sys_error("cannot create the telemetry directory", dir), "its parent is missing or read-only",
                        "create it (root, mode 0755) or fix telemetry= in plugstack.conf"));
  bool created = true;
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
  if (fd < 0 && errno == EEXIST) {
    created = false;
    fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
  }
  if (fd < 0)
    throw Error(explain(sys_error("cannot open the job's telemetry record", path),
                        "the directory is not writable by root or the name is a link", "check telemetry= in plugstack.conf"));
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
    ::close(fd);
    throw Error(explain(path + " is not a regular file of ours", "something else was put in its place",
                        "remove it; only the sampler writes there"));
  }
  if (created) {
    if (::fchown(fd, ::geteuid(), operators) != 0) { /* keeps our own group: still not world-readable */ }
    ::fchmod(fd, 0640);
    if (owner != 0 && !grant_read(fd, owner) && warning)
      *warning = "no POSIX ACL on " + path + " (" + std::strerror(errno) +
                 "): the job's owner cannot read it; operators can (mount the file system with ACLs)";
  }
  ::flock(fd, LOCK_EX);
  try {
    if (created) write_all(fd, "# saker-telemetry 1: one block per step and node; see saker-telemetry(5)\n", path);
    write_all(fd, block, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);  // releases the lock
}

std::string prometheus_path(const std::string& dir, const StepInfo& info) {
  return dir + "/saker_job_" + encode_token(info.job) + "_" + encode_token(info.step) + "_" + encode_token(info.node) + ".prom";
}

std::string prometheus_text(const NodeStepRecord& r, bool running) {
  const StepInfo& i = r.info;
  const std::string base = "job_id=\"" + prom_label(i.job) + "\",step=\"" + prom_label(i.step) + "\",node=\"" +
                           prom_label(i.node) + "\",user=\"" + prom_label(i.user) + "\",account=\"" + prom_label(i.account) + "\"";
  std::string out;
  auto gauge = [&](const char* name, const char* help, const std::vector<std::pair<std::string, double>>& samples) {
    if (samples.empty()) return;
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " gauge\n";
    for (const auto& [extra, v] : samples) {
      char buf[64];
      auto [end, ec] = std::to_chars(buf, buf + sizeof buf, std::isfinite(v) ? v : 0.0);  // shortest exact form
      out += std::string(name) + "{" + base + extra + "} " + std::string(buf, ec == std::errc() ? end : buf) + "\n";
    }
  };
  auto one = [&](double v) { return std::vector<std::pair<std::string, double>>{{"", v}}; };
  gauge("saker_job_running", "1 while the step runs on this node, 0 once it ended (Saker telemetry)", one(running ? 1 : 0));
  gauge("saker_job_cpu_efficiency_ratio", "CPU time used over wall time times allocated CPUs", one(r.cpu.efficiency));
  gauge("saker_job_cpu_seconds", "CPU seconds used by the step on this node", one(r.cpu.cpu_seconds));
  gauge("saker_job_memory_max_bytes", "Highest resident memory of the step on this node", one(static_cast<double>(r.cpu.rss_hwm)));
  if (r.cpu.mem_limit)
    gauge("saker_job_memory_limit_bytes", "Memory limit of the step on this node", one(static_cast<double>(r.cpu.mem_limit)));
  gauge("saker_job_io_read_bytes", "Bytes the step read from storage on this node", one(static_cast<double>(r.cpu.read_bytes)));
  gauge("saker_job_io_write_bytes", "Bytes the step wrote to storage on this node", one(static_cast<double>(r.cpu.write_bytes)));
  std::vector<std::pair<std::string, double>> util, idle, mem, energy, throttled, xid;
  for (const GpuSummary& g : r.gpus) {
    if (!g.present) continue;
    const std::string l = ",gpu=\"" + std::to_string(g.index) + "\"";
    util.emplace_back(l, g.util.mean / 100.0);
    idle.emplace_back(l, g.idle_fraction);
    mem.emplace_back(l, static_cast<double>(g.mem_used_max));
    energy.emplace_back(l, g.energy_j);
    throttled.emplace_back(l, g.throttled_fraction);
    xid.emplace_back(l, static_cast<double>(g.xid_errors));
  }
  gauge("saker_job_gpu_utilization_ratio", "Mean GPU utilisation of the step", util);
  gauge("saker_job_gpu_idle_ratio", "Share of samples in which the GPU was idle", idle);
  gauge("saker_job_gpu_memory_max_bytes", "Highest GPU memory used", mem);
  gauge("saker_job_gpu_energy_joules", "GPU energy used during the step", energy);
  gauge("saker_job_gpu_throttled_ratio", "Share of samples in which power or heat slowed the GPU", throttled);
  gauge("saker_job_gpu_xid_errors", "XID critical errors the driver reported during the step", xid);
  std::vector<std::pair<std::string, double>> share, bytes, stalls;
  for (const RankSummary& k : r.ranks) {
    const std::string l = ",rank=\"" + std::to_string(k.rank) + "\"";
    share.emplace_back(l, k.share);
    bytes.emplace_back(l, static_cast<double>(k.bytes));
    stalls.emplace_back(l, static_cast<double>(k.stalls));
  }
  gauge("saker_job_comm_allreduce_ratio", "Share of the rank's time spent in allreduce", share);
  gauge("saker_job_comm_allreduce_bytes", "Bytes the rank reduced", bytes);
  gauge("saker_job_comm_stalls", "Fusion stall reports of the rank", stalls);
  return out;
}

void write_prometheus(const std::string& dir, const NodeStepRecord& r, bool running) {
  const std::string path = prometheus_path(dir, r.info);
  const std::string tmp = path + ".tmp";  // not *.prom: the collector ignores it
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0)
    throw Error(explain(sys_error("cannot write the Prometheus file", tmp), "the directory is missing or not writable by root",
                        "create it or fix telemetry-prometheus= in plugstack.conf"));
  try {
    write_all(fd, prometheus_text(r, running), tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw Error(explain(sys_error("cannot rename to", path), "the directory changed underneath", "check the directory"));
  }
}

void prune_prometheus(const std::string& dir, const std::string& node, double keep_seconds) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  const std::string suffix = "_" + encode_token(node) + ".prom";
  const double now = static_cast<double>(std::time(nullptr));
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (!name.starts_with("saker_job_") || !name.ends_with(suffix)) continue;
    struct stat st{};
    if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    if (now - static_cast<double>(st.st_mtime) > keep_seconds) ::unlinkat(::dirfd(d), e->d_name, 0);
  }
  ::closedir(d);
}

std::vector<CommCounters> read_comm_counters(const std::string& dir, uid_t owner) {
  std::vector<CommCounters> out;
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return out;
  DIR* d = ::fdopendir(dfd);
  if (d == nullptr) {
    ::close(dfd);
    return out;
  }
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (!name.starts_with("comm.") || name.size() > 16) continue;
    long rank = -1;
    try {
      std::size_t used = 0;
      rank = std::stol(name.substr(5), &used);
      if (used != name.size() - 5) continue;
    } catch (const std::exception&) {
      continue;
    }
    const int fd = ::openat(dfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st{};
    CommCounters c{};
    const bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_uid == owner || st.st_uid == 0) &&
                    st.st_size == static_cast<off_t>(sizeof c) && ::pread(fd, &c, sizeof c, 0) == static_cast<ssize_t>(sizeof c);
    ::close(fd);
    if (ok && c.magic == CommCounters::kMagic && c.version == CommCounters::kVersion && c.rank == rank) out.push_back(c);
  }
  ::closedir(d);
  return out;
}

}  // namespace saker::telemetry
