#include "telemetry/proc.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <vector>

namespace saker::telemetry {
namespace {

std::optional<std::uint64_t> to_u64(std::string_view s) {
  std::uint64_t v = 0;
  if (s.empty()) return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<std::int64_t> to_i64(std::string_view s) {
  std::int64_t v = 0;
  if (s.empty()) return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::vector<std::string_view> words(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n')) ++i;
    std::size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t' && s[j] != '\n') ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

// Calls f(line) for each line.
template <typename F>
void for_each_line(std::string_view text, F f) {
  while (!text.empty()) {
    auto nl = text.find('\n');
    f(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
}

// "VmHWM:    1234 kB" -> bytes.
std::optional<std::uint64_t> kb_field(std::string_view line) {
  auto w = words(line);
  if (w.size() != 3 || w[2] != "kB") return std::nullopt;
  auto v = to_u64(w[1]);
  if (!v || *v > (UINT64_MAX >> 10)) return std::nullopt;
  return *v << 10;
}

}  // namespace

std::optional<ProcStat> parse_proc_stat(std::string_view text) {
  auto close = text.rfind(')');
  if (close == std::string_view::npos) return std::nullopt;
  auto f = words(text.substr(close + 1));
  // After "pid (comm)": state(3) ppid(4) ... utime(14) stime(15) cutime(16) cstime(17).
  if (f.size() < 15) return std::nullopt;
  ProcStat s;
  auto ppid = to_i64(f[1]);
  auto ut = to_u64(f[11]), st = to_u64(f[12]);
  auto cut = to_i64(f[13]), cst = to_i64(f[14]);
  if (!ppid || !ut || !st || !cut || !cst || *ppid < 0 || *cut < 0 || *cst < 0) return std::nullopt;
  s.ppid = static_cast<pid_t>(*ppid);
  s.utime = *ut;
  s.stime = *st;
  s.cutime = static_cast<std::uint64_t>(*cut);
  s.cstime = static_cast<std::uint64_t>(*cst);
  return s;
}

std::optional<ProcMemory> parse_proc_status(std::string_view text) {
  std::optional<std::uint64_t> rss, hwm;
  bool bad = false;
  for_each_line(text, [&](std::string_view line) {
    if (line.starts_with("VmRSS:")) (rss = kb_field(line)) ? void() : void(bad = true);
    else if (line.starts_with("VmHWM:")) (hwm = kb_field(line)) ? void() : void(bad = true);
  });
  // Kernel threads have neither line: nothing to count, not an error.
  if (bad) return std::nullopt;
  return ProcMemory{rss.value_or(0), hwm.value_or(rss.value_or(0))};
}

std::optional<IoBytes> parse_proc_io(std::string_view text) {
  std::optional<std::uint64_t> r, w;
  for_each_line(text, [&](std::string_view line) {
    auto f = words(line);
    if (f.size() != 2) return;
    if (f[0] == "read_bytes:") r = to_u64(f[1]);
    else if (f[0] == "write_bytes:") w = to_u64(f[1]);
  });
  if (!r || !w) return std::nullopt;
  return IoBytes{*r, *w};
}

std::optional<std::uint64_t> parse_single_number(std::string_view text) {
  auto f = words(text);
  if (f.size() != 1) return std::nullopt;
  return to_u64(f[0]);
}

std::optional<std::uint64_t> parse_keyed_number(std::string_view text, std::string_view key) {
  std::optional<std::uint64_t> out;
  for_each_line(text, [&](std::string_view line) {
    auto f = words(line);
    if (f.size() == 2 && f[0] == key) out = to_u64(f[1]);
  });
  return out;
}

std::optional<IoBytes> parse_io_stat_v2(std::string_view text) {
  IoBytes sum;
  bool ok = true;
  for_each_line(text, [&](std::string_view line) {
    auto f = words(line);
    for (std::size_t i = 1; i < f.size(); ++i) {
      auto eq = f[i].find('=');
      if (eq == std::string_view::npos) { ok = false; continue; }
      auto k = f[i].substr(0, eq);
      auto v = to_u64(f[i].substr(eq + 1));
      if (!v) { ok = false; continue; }
      if (k == "rbytes") sum.read += *v;
      else if (k == "wbytes") sum.write += *v;
    }
  });
  if (!ok) return std::nullopt;
  return sum;
}

std::optional<IoBytes> parse_blkio_v1(std::string_view text) {
  IoBytes sum;
  bool ok = true;
  for_each_line(text, [&](std::string_view line) {
    auto f = words(line);
    if (f.size() != 3) return;  // "Total N" has two words
    auto v = to_u64(f[2]);
    if (!v) { ok = false; return; }
    if (f[1] == "Read") sum.read += *v;
    else if (f[1] == "Write") sum.write += *v;
  });
  if (!ok) return std::nullopt;
  return sum;
}

std::optional<std::string> cgroup_path_of(std::string_view proc_cgroup, std::string_view controller) {
  std::optional<std::string> out;
  for_each_line(proc_cgroup, [&](std::string_view line) {
    // "ID:controller,controller:/path"
    auto a = line.find(':');
    if (a == std::string_view::npos) return;
    auto b = line.find(':', a + 1);
    if (b == std::string_view::npos) return;
    auto list = line.substr(a + 1, b - a - 1);
    auto path = line.substr(b + 1);
    if (path.empty() || path[0] != '/') return;
    if (controller.empty()) {
      if (list.empty() && line.substr(0, a) == "0") out = std::string(path);
      return;
    }
    while (!list.empty()) {
      auto comma = list.find(',');
      if (list.substr(0, comma) == controller) { out = std::string(path); return; }
      if (comma == std::string_view::npos) break;
      list.remove_prefix(comma + 1);
    }
  });
  return out;
}

std::optional<std::string> read_small_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[4096];
  while (out.size() < (1u << 20)) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) { ::close(fd); return std::nullopt; }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace saker::telemetry
