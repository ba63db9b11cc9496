#include "plugins/spank/attestation_step.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

extern "C" {
#include <slurm/slurm.h>
}

#include "common/error.hpp"
#include "common/file.hpp"
#include "policies/audit_head.hpp"
#include "provenance/text.hpp"

namespace saker::spank {

std::string step_name(std::uint32_t step_id) {
  switch (step_id) {
    case SLURM_BATCH_SCRIPT: return "batch";
    case SLURM_EXTERN_CONT: return "extern";
    case SLURM_INTERACTIVE_STEP: return "interactive";
    default: return std::to_string(step_id);
  }
}

std::string audit_head_text(const std::string& log_path) {
  if (log_path.empty()) return "";
  std::string problem;
  // No key: the nodes hold none (launch_audit.hpp); the head is stated as found.
  const auto head = policy::audit::read_head(log_path, "", problem);
  return head ? std::to_string(head->last_id) + ":" + head->last_hash : "";
}

provenance::Attestation build_attestation(const StepIds& ids, const NodeRecord& record, const std::string& node,
                                          const std::string& audit_log, std::int64_t now_unix) {
  provenance::Attestation a;
  a.job_id = std::to_string(ids.job_id);
  a.step_id = step_name(ids.step_id);
  // slurmstepd gives a job outside an array its own id as array id and NO_VAL as task id.
  // Not "array id != job id": the array's last task keeps the array's own id (7_4 is job 7).
  if (ids.array_job_id != 0 && ids.array_task_id != NO_VAL) {
    a.array_job_id = std::to_string(ids.array_job_id);
    a.array_task_id = std::to_string(ids.array_task_id);
  }
  a.user = record.user;
  a.uid = record.uid;
  a.account = record.account;
  a.partition = record.partition;
  a.zone = record.zone;
  a.nodes = record.nodes;
  a.node = node;
  a.time_unix = now_unix;
  // The policy's registry holds versions but no content digests yet: digest stays "".
  for (const policy::DatasetRef& d : record.datasets) a.datasets.push_back({d.name, d.version, record.policy_revision, ""});
  a.audit_log = audit_log;
  a.audit_head = audit_head_text(audit_log);
  return a;
}

std::string attestation_path(const std::string& dir, const std::string& node, std::uint32_t job_id, const std::string& step) {
  // node_record_path checks the node name (no '/', no "..").
  const std::string record = node_record_path(dir, node, job_id);
  return record + "." + step + ".att";
}

namespace {
// Writes TEXT to PATH through a temporary of this process renamed over it, so that a reader
// sees the old file or the whole new one, never a part. FINISH (ownership, mode) runs on the
// temporary's descriptor before the rename. "" or what failed, naming the file.
template <typename Finish>
std::string replace_file(const std::string& path, const std::string& text, mode_t create_mode, Finish finish) {
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, create_mode);
  if (fd < 0) return "cannot create " + tmp + ": " + std::strerror(errno);
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ok = ok && finish(fd);
  const int err = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = ok ? errno : err;
    ::unlink(tmp.c_str());
    return "cannot write " + path + ": " + std::strerror(e);
  }
  return "";
}
}  // namespace

std::string write_attestation_file(const std::string& path, const std::string& text, std::uint32_t gid) {
  const std::string node_dir = path.substr(0, path.rfind('/'));
  const std::string dir = node_dir.substr(0, node_dir.rfind('/'));
  for (const std::string& d : {dir, node_dir}) {
    struct stat st {};
    // Made only where missing: after the node's first step both exist, and a mkdir that
    // fails with EEXIST costs a path walk per directory per node-step.
    if (::lstat(d.c_str(), &st) != 0) {
      if (errno != ENOENT || (::mkdir(d.c_str(), 0711) != 0 && errno != EEXIST) || ::lstat(d.c_str(), &st) != 0)
        return "cannot create " + d + ": " + std::strerror(errno);
    }
    // A directory someone else made (or a link to one) could let them swap the file.
    if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 022) != 0)
      return d + " is not a directory of uid " + std::to_string(::geteuid()) +
             " that only it may write; remove it (spank_saker.so makes it again)";
  }
  // Readable by the job's group (the task reads its attestation), written by root only.
  const auto give_to_group = [gid](int fd) { return ::fchown(fd, ::geteuid(), gid) == 0 && ::fchmod(fd, 0440) == 0; };
  // A new step's file is written at its own name: mode 0400 and root's group until it is
  // whole, so the job's tasks (and anyone but root) cannot read a part; a temporary and a
  // rename would cost a second name and a rename per node-step (issue 30). A file already
  // there (a requeued step's) is replaced through a temporary, whole or not at all.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400);
  if (fd < 0 && errno == EEXIST) return replace_file(path, text, 0400, give_to_group);
  if (fd < 0) return "cannot create " + path + ": " + std::strerror(errno);
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && give_to_group(fd);
  int err = errno;
  if (::close(fd) != 0 && ok) ok = false, err = errno;
  if (ok) return "";
  ::unlink(path.c_str());
  return "cannot write " + path + ": " + std::strerror(err);
}

std::string known_key_path(const std::string& state_dir, const std::string& node) {
  const std::string record = node_record_path(state_dir, node, 0);  // checks the node name
  return record.substr(0, record.rfind('/')) + "/attest-key.pub";
}

namespace {
// Version 2 carries the binding (site_key.hpp KnownPublicKey); a version 1 note is none.
constexpr char kKnownKeyHead[] = "saker-attest-pub 2";

// The note's text when it is what a step of this daemon wrote: a regular file of its own
// user that nobody else may read or write, not a link. Anything else is not believed.
std::optional<std::string> read_own_private_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  std::optional<std::string> text;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() && (st.st_mode & 077) == 0 &&
      st.st_size > 0 && st.st_size < 1024) {
    std::string buf(static_cast<std::size_t>(st.st_size), '\0');
    if (::read(fd, buf.data(), buf.size()) == static_cast<ssize_t>(buf.size())) text = std::move(buf);
  }
  ::close(fd);
  return text;
}

// The value of "\nNAME=" up to the next newline in `text`; nullopt when absent.
std::optional<std::string_view> field(std::string_view text, std::string_view name) {
  const std::string key = "\n" + std::string(name) + "=";
  const auto at = text.find(key);
  if (at == std::string_view::npos) return std::nullopt;
  const auto begin = at + key.size(), end = text.find('\n', begin);
  if (end == std::string_view::npos) return std::nullopt;
  return text.substr(begin, end - begin);
}
}  // namespace

std::optional<provenance::KnownPublicKey> read_known_key(const std::string& path) {
  const auto text = read_own_private_file(path);
  if (!text || text->rfind(std::string(kKnownKeyHead) + "\n", 0) != 0 || text->back() != '\n')
    return std::nullopt;
  const auto file_id = field(*text, "file"), pub = field(*text, "pub"), binding = field(*text, "bind");
  if (!file_id || file_id->empty() || !pub || !binding || binding->size() != 64) return std::nullopt;
  const auto raw = provenance::unhex(*pub);
  provenance::KnownPublicKey known;
  if (!raw || raw->size() != known.pub.size()) return std::nullopt;
  known.file_id = std::string(*file_id);
  std::copy(raw->begin(), raw->end(), known.pub.begin());
  known.binding = std::string(*binding);
  return known;
}

std::string write_known_key(const std::string& path, const provenance::SiteKey& key) {
  const std::string text = std::string(kKnownKeyHead) + "\nfile=" + key.file_id + "\npub=" +
                           provenance::hex(std::string_view(reinterpret_cast<const char*>(key.pub.data()), key.pub.size())) +
                           "\nbind=" + provenance::key_binding(key.seed, key.pub) + "\n";
  return replace_file(path, text, 0600, [](int fd) { return ::fchmod(fd, 0600) == 0; });
}

int remove_job_attestations(const std::string& dir, const std::string& node, std::uint32_t job_id) {
  const std::string record = node_record_path(dir, node, job_id);
  const std::string node_dir = record.substr(0, record.rfind('/'));
  const std::string prefix = record.substr(record.rfind('/') + 1) + ".";
  DIR* d = ::opendir(node_dir.c_str());
  if (d == nullptr) return 0;
  int removed = 0;
  while (const dirent* e = ::readdir(d))
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0 && ::unlinkat(::dirfd(d), e->d_name, 0) == 0) ++removed;
  ::closedir(d);
  return removed;
}

}  // namespace saker::spank
