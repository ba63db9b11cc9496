// provenance::code_identity(): which program wrote the checkpoint. For an interpreter
// (python3 train.py, bash job.sh) the script is what identifies the code, not the
// interpreter, so the first argument that is not an option is taken as the script.
#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "ckpt/provenance.hpp"
#include "common/file.hpp"

namespace saker::ckpt::provenance {
namespace fs = std::filesystem;

namespace {

bool is_interpreter(const std::string& exe) {
  const std::string base = fs::path(exe).filename().string();
  for (const char* p : {"python", "perl", "ruby", "bash", "sh", "dash", "Rscript", "julia", "node"})
    if (base.rfind(p, 0) == 0) return true;
  return false;
}

std::vector<std::string> cmdline() {
  std::vector<std::string> args;
  const auto text = file::read("/proc/self/cmdline");
  if (!text) return args;
  std::size_t a = 0;
  while (a < text->size()) {
    const auto z = text->find('\0', a);
    args.push_back(text->substr(a, z - a));
    if (z == std::string::npos) break;
    a = z + 1;
  }
  return args;
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

bool is_hex40(const std::string& s) { return s.size() >= 40 && s.find_first_not_of("0123456789abcdef") == std::string::npos; }

// The commit HEAD names in the repository holding `start` (a loose ref, a packed ref or
// a detached HEAD); "" outside a repository. Reads files only: no git process.
std::string git_commit(fs::path start) {
  std::error_code ec;
  for (fs::path dir = start; !dir.empty(); dir = dir.parent_path()) {
    fs::path git = dir / ".git";
    if (fs::is_regular_file(git, ec)) {  // a worktree or submodule: "gitdir: PATH"
      const std::string line = trimmed(file::read(git.string()).value_or(""));
      if (line.rfind("gitdir: ", 0) != 0) return "";
      git = fs::path(line.substr(8)).is_absolute() ? fs::path(line.substr(8)) : dir / line.substr(8);
    }
    if (fs::is_directory(git, ec)) {
      const std::string head = trimmed(file::read((git / "HEAD").string()).value_or(""));
      if (is_hex40(head)) return head;
      if (head.rfind("ref: ", 0) != 0) return "";
      const std::string ref = head.substr(5);
      fs::path common = git;
      if (const auto c = file::read((git / "commondir").string())) common = git / trimmed(*c);
      for (const fs::path& base : {git, common}) {
        const std::string loose = trimmed(file::read((base / ref).string()).value_or(""));
        if (is_hex40(loose)) return loose;
      }
      const std::string packed = file::read((common / "packed-refs").string()).value_or("");
      const auto at = packed.find(" " + ref + "\n");
      if (at != std::string::npos && at >= 40 && is_hex40(packed.substr(at - 40, 40))) return packed.substr(at - 40, 40);
      return "";
    }
    if (dir == dir.root_path()) break;
  }
  return "";
}

Code compute() {
  Code c;
  std::error_code ec;
  const std::string exe = fs::read_symlink("/proc/self/exe", ec).string();
  c.path = exe;
  const auto args = cmdline();
  if (is_interpreter(exe)) {
    for (std::size_t i = 1; i < args.size(); ++i) {
      const std::string& a = args[i];
      if (a == "-m" || a == "-c") {
        // A module or inline code: no single file is the code.
        c.interpreter = exe;
        c.path = a + " " + (i + 1 < args.size() ? args[i + 1] : "");
        return c;
      }
      if (a.empty() || a[0] == '-') continue;
      const fs::path script = fs::path(a).is_absolute() ? fs::path(a) : fs::read_symlink("/proc/self/cwd", ec) / a;
      if (fs::is_regular_file(script, ec)) {
        c.interpreter = exe;
        c.path = fs::weakly_canonical(script, ec).string();
      }
      break;
    }
  }
  try {
    c.sha256 = file_sha256(c.path);
  } catch (const std::exception&) {
    c.sha256.clear();
  }
  c.git_commit = git_commit(fs::path(c.path).parent_path());
  return c;
}

}  // namespace

Code code_identity() {
  static std::once_flag once;
  static Code code;
  std::call_once(once, [] { code = compute(); });
  return code;
}

}  // namespace saker::ckpt::provenance
