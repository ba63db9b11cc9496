#include "telemetry/record.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>

#include "common/error.hpp"

namespace saker::telemetry {
namespace {

std::string num(double v) {
  if (!std::isfinite(v)) v = 0;
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : "0";
}
std::string num(std::uint64_t v) { return std::to_string(v); }

// "key=value" pairs of one line.
class Line {
 public:
  explicit Line(const char* kind) : text_(kind) {}
  Line& add(const char* key, const std::string& value) {
    text_ += ' ';
    text_ += key;
    text_ += '=';
    text_ += value;
    return *this;
  }
  Line& num(const char* key, double v) { return add(key, telemetry::num(v)); }
  Line& u64(const char* key, std::uint64_t v) { return add(key, telemetry::num(v)); }
  Line& str(const char* key, std::string_view v) { return add(key, encode_token(v)); }
  Line& stats(const char* prefix, const Stats& s) {
    const std::string p(prefix);
    add((p + "_min").c_str(), telemetry::num(s.min));
    add((p + "_mean").c_str(), telemetry::num(s.mean));
    add((p + "_max").c_str(), telemetry::num(s.max));
    add((p + "_p50").c_str(), telemetry::num(s.p50));
    add((p + "_p90").c_str(), telemetry::num(s.p90));
    add((p + "_p99").c_str(), telemetry::num(s.p99));
    return add((p + "_n").c_str(), std::to_string(s.n));
  }
  std::string done() { return text_ + '\n'; }

 private:
  std::string text_;
};

bool token_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '@' || c == '+' || c == ':' || c == '-';
}

// Fields of a parsed line; getters record the first problem.
class Fields {
 public:
  Fields(std::string_view rest, std::string* problem) : problem_(problem) {
    std::size_t i = 0;
    while (i < rest.size()) {
      while (i < rest.size() && rest[i] == ' ') ++i;
      std::size_t j = rest.find(' ', i);
      if (j == std::string_view::npos) j = rest.size();
      auto tok = rest.substr(i, j - i);
      if (!tok.empty()) {
        auto eq = tok.find('=');
        if (eq == std::string_view::npos || eq == 0) fail("'" + std::string(tok) + "' is not key=value");
        else map_[std::string(tok.substr(0, eq))] = tok.substr(eq + 1);
      }
      i = j;
    }
  }
  void text(const char* key, std::string& out) {
    if (auto it = map_.find(key); it != map_.end()) out = decode_token(it->second);
  }
  template <typename T>
  void number(const char* key, T& out) {
    auto it = map_.find(key);
    if (it == map_.end()) return;
    T v{};
    auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
    if (ec != std::errc() || end != it->second.data() + it->second.size()) {
      fail(std::string(key) + "='" + std::string(it->second) + "' is not a number");
      return;
    }
    if constexpr (std::is_floating_point_v<T>)
      if (!std::isfinite(v)) { fail(std::string(key) + " is not finite"); return; }
    out = v;
  }
  void stats(const std::string& p, Stats& s) {
    number((p + "_min").c_str(), s.min);
    number((p + "_mean").c_str(), s.mean);
    number((p + "_max").c_str(), s.max);
    number((p + "_p50").c_str(), s.p50);
    number((p + "_p90").c_str(), s.p90);
    number((p + "_p99").c_str(), s.p99);
    number((p + "_n").c_str(), s.n);
  }
  void list(const char* key, std::vector<double>& out) {
    auto it = map_.find(key);
    if (it == map_.end()) return;
    std::string_view s = it->second;
    while (!s.empty()) {
      auto comma = s.find(',');
      auto item = s.substr(0, comma);
      double v = 0;
      auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
      if (ec != std::errc() || end != item.data() + item.size() || !std::isfinite(v)) {
        fail(std::string(key) + " holds '" + std::string(item) + "', not a number");
        return;
      }
      out.push_back(v);
      if (out.size() > 1000000) { fail(std::string(key) + " has more than a million values"); return; }
      if (comma == std::string_view::npos) break;
      s.remove_prefix(comma + 1);
    }
  }

 private:
  void fail(std::string why) {
    if (problem_->empty()) *problem_ = std::move(why);
  }
  std::map<std::string, std::string_view, std::less<>> map_;
  std::string* problem_;
};

}  // namespace

std::string encode_token(std::string_view s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (token_char(static_cast<char>(c))) out += static_cast<char>(c);
    else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out.empty() ? "-" : out;
}

std::string decode_token(std::string_view s) {
  if (s == "-") return {};
  std::string out;
  auto hexval = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
      out += static_cast<char>(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

Stats summarize(std::vector<double> v) {
  Stats s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.min = v.front();
  s.max = v.back();
  s.mean = sum / static_cast<double>(v.size());
  auto rank = [&](double p) {
    auto k = static_cast<std::size_t>(std::ceil(p * static_cast<double>(v.size())));
    return v[std::clamp<std::size_t>(k, 1, v.size()) - 1];
  };
  s.p50 = rank(0.50);
  s.p90 = rank(0.90);
  s.p99 = rank(0.99);
  return s;
}

std::string format_record(const NodeStepRecord& r) {
  const StepInfo& i = r.info;
  std::string out = Line("step")
                        .str("job", i.job).str("step", i.step).str("node", i.node).str("user", i.user)
                        .u64("uid", i.uid).str("account", i.account).num("start", i.start).num("end", i.end)
                        .num("interval", i.interval).u64("samples", i.samples).u64("tasks", i.tasks)
                        .u64("cpus", i.cpus).str("source", i.source).num("sampler_core_share", i.sampler_core_share)
                        .num("final_write_ms", i.final_write_ms).str("stopped_by", i.stopped_by).str("gpu_note", i.gpu_note)
                        .str("note", i.note).done();
  const CpuSummary& c = r.cpu;
  out += Line("cpu").num("cpu_seconds", c.cpu_seconds).num("efficiency", c.efficiency).stats("util", c.util)
             .u64("rss_hwm", c.rss_hwm).u64("mem_limit", c.mem_limit).u64("read_bytes", c.read_bytes)
             .u64("write_bytes", c.write_bytes).done();
  for (const GpuSummary& g : r.gpus)
    out += Line("gpu").u64("index", g.index).u64("present", g.present ? 1 : 0).stats("util", g.util)
               .num("idle_fraction", g.idle_fraction).u64("mem_used_max", g.mem_used_max).u64("mem_total", g.mem_total)
               .num("energy_j", g.energy_j).num("power_max_w", g.power_max_w)
               .num("temperature_max_c", g.temperature_max_c).num("sm_clock_mean_mhz", g.sm_clock_mean_mhz)
               .num("throttled_fraction", g.throttled_fraction).u64("throttle_reasons", g.throttle_reasons)
               .u64("ecc_uncorrected", g.ecc_uncorrected).u64("xid_errors", g.xid_errors)
               .u64("last_xid", g.last_xid).u64("errors", g.errors).str("last_error", g.last_error)
               .done();
  for (const RankSummary& k : r.ranks)
    out += Line("rank").u64("rank", static_cast<std::uint64_t>(k.rank)).u64("calls", k.calls).u64("bytes", k.bytes)
               .u64("stalls", k.stalls).num("allreduce_s", k.allreduce_s).num("lifetime_s", k.lifetime_s)
               .num("share", k.share).done();
  for (const Series& s : r.series) {
    std::string values;
    for (double v : s.values) values += (values.empty() ? "" : ",") + num(std::round(v * 10) / 10);
    out += Line("series").str("what", s.what).num("t0", s.t0).num("dt", s.dt).add("values", values.empty() ? "-" : values).done();
  }
  return out + "end\n";
}

ParseResult parse_records(std::string_view text) {
  ParseResult result;
  std::optional<NodeStepRecord> cur;
  std::size_t cur_line = 0;
  std::string problem;
  std::size_t lineno = 0;
  auto drop = [&](const std::string& why) {
    result.problems.push_back("line " + std::to_string(cur_line) + ": block skipped: " + why);
    cur.reset();
    problem.clear();
  };
  while (!text.empty()) {
    auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    ++lineno;
    if (line.empty() || line[0] == '#') continue;
    auto sp = line.find(' ');
    auto kind = line.substr(0, sp);
    auto rest = sp == std::string_view::npos ? std::string_view() : line.substr(sp + 1);
    if (kind == "step") {
      if (cur) drop("no 'end' line before the next step (a writer stopped mid-record)");
      cur.emplace();
      cur_line = lineno;
      Fields f(rest, &problem);
      StepInfo& i = cur->info;
      f.text("job", i.job); f.text("step", i.step); f.text("node", i.node); f.text("user", i.user);
      f.number("uid", i.uid); f.text("account", i.account); f.number("start", i.start); f.number("end", i.end);
      f.number("interval", i.interval); f.number("samples", i.samples); f.number("tasks", i.tasks);
      f.number("cpus", i.cpus); f.text("source", i.source); f.number("sampler_core_share", i.sampler_core_share);
      f.number("final_write_ms", i.final_write_ms); f.text("stopped_by", i.stopped_by); f.text("gpu_note", i.gpu_note); f.text("note", i.note);
      if (i.job.empty() || i.step.empty() || i.node.empty()) problem = problem.empty() ? "step line without job, step or node" : problem;
      continue;
    }
    if (!cur) {
      if (kind != "end") result.problems.push_back("line " + std::to_string(lineno) + ": '" + std::string(kind) + "' outside a step block, ignored");
      continue;
    }
    Fields f(rest, &problem);
    if (kind == "cpu") {
      CpuSummary& c = cur->cpu;
      f.number("cpu_seconds", c.cpu_seconds); f.number("efficiency", c.efficiency); f.stats("util", c.util);
      f.number("rss_hwm", c.rss_hwm); f.number("mem_limit", c.mem_limit); f.number("read_bytes", c.read_bytes);
      f.number("write_bytes", c.write_bytes);
    } else if (kind == "gpu") {
      GpuSummary g;
      unsigned present = 1;
      f.number("index", g.index); f.number("present", present); f.stats("util", g.util);
      f.number("idle_fraction", g.idle_fraction); f.number("mem_used_max", g.mem_used_max);
      f.number("mem_total", g.mem_total); f.number("energy_j", g.energy_j); f.number("power_max_w", g.power_max_w);
      f.number("temperature_max_c", g.temperature_max_c); f.number("sm_clock_mean_mhz", g.sm_clock_mean_mhz);
      f.number("throttled_fraction", g.throttled_fraction); f.number("throttle_reasons", g.throttle_reasons);
      f.number("ecc_uncorrected", g.ecc_uncorrected); f.number("xid_errors", g.xid_errors);
      f.number("last_xid", g.last_xid); f.number("errors", g.errors); f.text("last_error", g.last_error);
      g.present = present != 0;
      cur->gpus.push_back(g);
    } else if (kind == "rank") {
      RankSummary k;
      f.number("rank", k.rank); f.number("calls", k.calls); f.number("bytes", k.bytes); f.number("stalls", k.stalls);
      f.number("allreduce_s", k.allreduce_s); f.number("lifetime_s", k.lifetime_s); f.number("share", k.share);
      cur->ranks.push_back(k);
    } else if (kind == "series") {
      Series s;
      f.text("what", s.what); f.number("t0", s.t0); f.number("dt", s.dt);
      if (rest.find("values=-") == std::string_view::npos) f.list("values", s.values);
      cur->series.push_back(std::move(s));
    } else if (kind == "end") {
      if (!problem.empty()) drop(problem);
      else result.records.push_back(std::move(*cur));
      cur.reset();
      continue;
    }
    // Unknown kinds come from a newer writer: ignored.
  }
  if (cur) drop("no 'end' line (the file ends mid-record)");
  return result;
}

std::vector<NodeStepRecord> latest_per_step_and_node(std::vector<NodeStepRecord> records) {
  std::map<std::pair<std::string, std::string>, NodeStepRecord> best;
  for (auto& r : records) {
    auto key = std::make_pair(r.info.step, r.info.node);
    auto it = best.find(key);
    if (it == best.end() || r.info.start >= it->second.info.start) best[key] = std::move(r);
  }
  std::vector<NodeStepRecord> out;
  for (auto& [k, r] : best) out.push_back(std::move(r));
  // Numeric step order where the steps are numbers ("batch", "extern" last).
  std::stable_sort(out.begin(), out.end(), [](const NodeStepRecord& a, const NodeStepRecord& b) {
    auto key = [](const std::string& s) {
      std::uint64_t v = 0;
      auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      return ec == std::errc() && end == s.data() + s.size() ? v : UINT64_MAX;
    };
    return key(a.info.step) < key(b.info.step);
  });
  return out;
}

std::string record_path(const std::string& dir, const std::string& job) {
  bool ok = !job.empty() && job.size() < 32 && job[0] >= '0' && job[0] <= '9';
  int seps = 0;
  for (char c : job) {
    if (c == '_' || c == '+') ++seps;
    else if (c < '0' || c > '9') ok = false;
  }
  if (!ok || seps > 1 || job.back() == '_' || job.back() == '+')
    throw Error(explain("'" + job + "' is not a Slurm job id", "job ids are digits (array tasks 12_3, het components 12+1)",
                        "give the id squeue or sacct shows"));
  return dir + "/" + job + ".telemetry";
}

}  // namespace saker::telemetry
