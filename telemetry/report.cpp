#include "telemetry/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/json.hpp"
#include "telemetry/nvml.hpp"

namespace saker::telemetry {
namespace {

std::string pct(double fraction) { return std::to_string(static_cast<int>(std::lround(fraction * 100))) + "%"; }

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string step_name(const NodeStepRecord& r) { return r.info.job + "." + r.info.step; }

std::string pad(std::string s, std::size_t w) {
  // Pads by display width (the sparkline glyphs are 3 bytes each).
  std::size_t shown = 0;
  for (unsigned char c : s) shown += (c & 0xC0) != 0x80;
  if (shown < w) s.append(w - shown, ' ');
  return s;
}

}  // namespace

std::string human_bytes(double b) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (b >= 1024 && u < 5) {
    b /= 1024;
    ++u;
  }
  return (u == 0 ? std::to_string(static_cast<long long>(b)) : fixed(b, b < 10 ? 1 : 0)) + " " + units[u];
}

std::vector<std::string> verdicts(const std::vector<NodeStepRecord>& records) {
  std::vector<std::pair<double, std::string>> out;  // (severity, text)
  for (const auto& r : records) {
    const std::string where = "node " + r.info.node + " (step " + step_name(r) + ")";
    const double wall = std::max(0.0, r.info.end - r.info.start);
    for (const auto& g : r.gpus) {
      if (!g.present) {
        out.emplace_back(0.9, "GPU " + std::to_string(g.index) + " on " + where + " was not visible to NVML" +
                                  (r.info.gpu_note.empty() ? "" : ": " + r.info.gpu_note));
        continue;
      }
      if (g.util.n > 0 && g.idle_fraction >= 0.5)
        out.emplace_back(g.idle_fraction, "GPU " + std::to_string(g.index) + " on node " + r.info.node + " idle " +
                                              pct(g.idle_fraction) + " of step " + step_name(r));
      else if (g.util.n > 0 && g.util.mean < 30)
        out.emplace_back(0.5, "GPU " + std::to_string(g.index) + " on node " + r.info.node + " busy only " +
                                  fixed(g.util.mean, 0) + "% on average in step " + step_name(r));
      if (g.throttled_fraction >= 0.1)
        out.emplace_back(g.throttled_fraction, "GPU " + std::to_string(g.index) + " on " + where + " was slowed (" +
                                                   describe_throttle_reasons(g.throttle_reasons & kThrottleSlowdownMask) +
                                                   ") in " + pct(g.throttled_fraction) + " of samples");
      if (g.ecc_uncorrected > 0)
        out.emplace_back(1.0, "GPU " + std::to_string(g.index) + " on " + where + " reported " +
                                  std::to_string(g.ecc_uncorrected) + " uncorrected ECC error(s): drain the node and check it");
      if (g.xid_errors > 0)
        out.emplace_back(1.0, "GPU " + std::to_string(g.index) + " on " + where + " reported " + std::to_string(g.xid_errors) +
                                  " XID error(s), the last XID " + std::to_string(g.last_xid) +
                                  " (see the driver's XID table; the job may have failed because of the GPU)");
      if (g.errors > 0)
        out.emplace_back(0.3, "NVML failed " + std::to_string(g.errors) + " time(s) on GPU " + std::to_string(g.index) +
                                  " of " + where + " (last: " + g.last_error + ")");
    }
    if (!r.info.note.empty()) out.emplace_back(0.35, "telemetry on " + where + ": " + r.info.note);
    if (r.gpus.empty() && !r.info.gpu_note.empty())
      out.emplace_back(0.4, "no GPU figures on " + where + ": " + r.info.gpu_note);
    if (r.info.cpus > 0 && wall >= 1) {
      const double e = r.cpu.efficiency;
      if (e < 0.75)
        out.emplace_back(1.0 - e, "CPU efficiency on " + where + " was " + pct(e) + " of " + std::to_string(r.info.cpus) +
                                      " allocated CPU(s): the step used about " + fixed(e * r.info.cpus, 1) +
                                      (e < 0.5 ? "; ask for fewer CPUs or run more work per task" : ""));
    }
    if (r.cpu.mem_limit > 0) {
      const double m = static_cast<double>(r.cpu.rss_hwm) / static_cast<double>(r.cpu.mem_limit);
      if (m >= 0.9)
        out.emplace_back(m, "memory on " + where + " peaked at " + pct(m) + " of its limit (" + human_bytes(static_cast<double>(r.cpu.rss_hwm)) +
                                " of " + human_bytes(static_cast<double>(r.cpu.mem_limit)) + "): close to being killed");
      else if (m < 0.25 && r.cpu.mem_limit >= (1ull << 30))
        out.emplace_back(0.2, "memory on " + where + " peaked at " + human_bytes(static_cast<double>(r.cpu.rss_hwm)) + ", " +
                                  pct(m) + " of the " + human_bytes(static_cast<double>(r.cpu.mem_limit)) + " requested");
    }
    for (const auto& k : r.ranks) {
      if (k.share >= 0.2)
        out.emplace_back(k.share, "rank " + std::to_string(k.rank) + " spent " + pct(k.share) +
                                      " of its time in allreduce (" + human_bytes(static_cast<double>(k.bytes)) + " reduced on " +
                                      r.info.node + ")");
      if (k.stalls > 0)
        out.emplace_back(0.8, "rank " + std::to_string(k.rank) + " saw " + std::to_string(k.stalls) +
                                  " fusion stall(s): some rank skipped a tensor (see its log)");
    }
    if (r.info.sampler_core_share > 0.01 && wall >= 60)  // start-up costs dominate shorter steps
      out.emplace_back(0.1, "the sampler itself used " + fixed(r.info.sampler_core_share * 100, 2) + "% of a core on " + where +
                                " (raise telemetry-interval)");
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> texts;
  for (auto& [s, t] : out) texts.push_back(std::move(t));
  return texts;
}

std::string sparkline(const std::vector<double>& v, std::size_t width) {
  static const char* bars[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  if (v.empty() || width == 0) return "";
  const std::size_t n = std::min(width, v.size());
  std::string out;
  for (std::size_t b = 0; b < n; ++b) {
    const std::size_t from = b * v.size() / n, to = std::max(from + 1, (b + 1) * v.size() / n);
    double sum = 0;
    for (std::size_t i = from; i < to; ++i) sum += v[i];
    const double mean = std::clamp(sum / static_cast<double>(to - from), 0.0, 100.0);
    out += bars[std::min<std::size_t>(7, static_cast<std::size_t>(mean / 100.0 * 8))];
  }
  return out;
}

std::string table(const std::vector<NodeStepRecord>& records) {
  std::string out;
  out += pad("STEP", 12) + pad("NODE", 10) + pad("WALL", 9) + pad("CPUS", 5) + pad("CPU EFF", 8) + pad("CPU MEAN/P90", 13) +
         pad("MEM PEAK", 10) + pad("MEM LIMIT", 10) + pad("READ", 9) + "WRITE\n";
  for (const auto& r : records) {
    out += pad(step_name(r), 12) + pad(r.info.node, 10) + pad(fixed(r.info.end - r.info.start, 1) + "s", 9) +
           pad(std::to_string(r.info.cpus), 5) + pad(pct(r.cpu.efficiency), 8) +
           pad(fixed(r.cpu.util.mean, 0) + "/" + fixed(r.cpu.util.p90, 0) + "%", 13) +
           pad(human_bytes(static_cast<double>(r.cpu.rss_hwm)), 10) +
           pad(r.cpu.mem_limit ? human_bytes(static_cast<double>(r.cpu.mem_limit)) : "-", 10) +
           pad(human_bytes(static_cast<double>(r.cpu.read_bytes)), 9) + human_bytes(static_cast<double>(r.cpu.write_bytes)) + "\n";
  }
  bool any_gpu = false, any_rank = false;
  for (const auto& r : records) {
    any_gpu |= !r.gpus.empty();
    any_rank |= !r.ranks.empty();
  }
  if (any_gpu) {
    out += "\n" + pad("STEP", 12) + pad("NODE", 10) + pad("GPU", 4) + pad("UTIL MEAN/P90", 14) + pad("IDLE", 6) +
           pad("MEM PEAK", 10) + pad("ENERGY", 10) + pad("POWER MAX", 10) + pad("TEMP MAX", 9) + pad("THROTTLED", 10) + "ECC/XID\n";
    for (const auto& r : records)
      for (const auto& g : r.gpus) {
        if (!g.present) {
          out += pad(step_name(r), 12) + pad(r.info.node, 10) + pad(std::to_string(g.index), 4) + "(not visible to NVML)\n";
          continue;
        }
        out += pad(step_name(r), 12) + pad(r.info.node, 10) + pad(std::to_string(g.index), 4) +
               pad(fixed(g.util.mean, 0) + "/" + fixed(g.util.p90, 0) + "%", 14) + pad(pct(g.idle_fraction), 6) +
               pad(human_bytes(static_cast<double>(g.mem_used_max)), 10) + pad(fixed(g.energy_j / 1000, 1) + " kJ", 10) +
               pad(fixed(g.power_max_w, 0) + " W", 10) + pad(fixed(g.temperature_max_c, 0) + " C", 9) +
               pad(pct(g.throttled_fraction), 10) + std::to_string(g.ecc_uncorrected) + "/" + std::to_string(g.xid_errors) + "\n";
      }
  }
  if (any_rank) {
    out += "\n" + pad("STEP", 12) + pad("NODE", 10) + pad("RANK", 5) + pad("ALLREDUCE", 10) + pad("SHARE", 6) + pad("CALLS", 8) +
           pad("REDUCED", 10) + "STALLS\n";
    for (const auto& r : records)
      for (const auto& k : r.ranks)
        out += pad(step_name(r), 12) + pad(r.info.node, 10) + pad(std::to_string(k.rank), 5) +
               pad(fixed(k.allreduce_s, 2) + "s", 10) + pad(pct(k.share), 6) + pad(std::to_string(k.calls), 8) +
               pad(human_bytes(static_cast<double>(k.bytes)), 10) + std::to_string(k.stalls) + "\n";
  }
  out += "\nutilisation over time (" + std::string(sparkline({0, 100}, 2)) + " = 0..100%):\n";
  for (const auto& r : records)
    for (const auto& s : r.series)
      if (!s.values.empty())
        out += "  " + pad(step_name(r) + " " + r.info.node + " " + s.what, 28) + sparkline(s.values) + "  (every " +
               fixed(s.dt, s.dt < 1 ? 1 : 0) + "s)\n";
  return out;
}

std::string to_json(const std::string& job, const std::vector<NodeStepRecord>& records,
                    const std::vector<std::string>& problems) {
  json::Writer w;
  auto stats = [&](const char* key, const Stats& s) {
    w.key(key).begin_object().key("n").value(static_cast<std::uint64_t>(s.n)).key("min").value(s.min).key("mean").value(s.mean)
        .key("max").value(s.max).key("p50").value(s.p50).key("p90").value(s.p90).key("p99").value(s.p99).end_object();
  };
  w.begin_object().key("job").value(job).key("steps").begin_array();
  for (const auto& r : records) {
    const StepInfo& i = r.info;
    w.begin_object().key("step").value(i.step).key("node").value(i.node).key("user").value(i.user).key("account").value(i.account)
        .key("start").value(i.start).key("end").value(i.end).key("interval_s").value(i.interval)
        .key("samples").value(static_cast<std::uint64_t>(i.samples)).key("tasks").value(static_cast<std::uint64_t>(i.tasks))
        .key("cpus").value(static_cast<std::uint64_t>(i.cpus)).key("source").value(i.source)
        .key("sampler_core_share").value(i.sampler_core_share).key("final_write_ms").value(i.final_write_ms);
    if (!i.stopped_by.empty()) w.key("stopped_by").value(i.stopped_by);
    if (!i.gpu_note.empty()) w.key("gpu_note").value(i.gpu_note);
    if (!i.note.empty()) w.key("note").value(i.note);
    w.key("cpu").begin_object().key("cpu_seconds").value(r.cpu.cpu_seconds).key("efficiency").value(r.cpu.efficiency);
    stats("util_percent", r.cpu.util);
    w.key("rss_hwm_bytes").value(r.cpu.rss_hwm).key("mem_limit_bytes").value(r.cpu.mem_limit)
        .key("read_bytes").value(r.cpu.read_bytes).key("write_bytes").value(r.cpu.write_bytes).end_object();
    w.key("gpus").begin_array();
    for (const auto& g : r.gpus) {
      w.begin_object().key("index").value(g.index).key("present").value(g.present);
      stats("util_percent", g.util);
      w.key("idle_fraction").value(g.idle_fraction).key("mem_used_max_bytes").value(g.mem_used_max)
          .key("mem_total_bytes").value(g.mem_total).key("energy_j").value(g.energy_j).key("power_max_w").value(g.power_max_w)
          .key("temperature_max_c").value(g.temperature_max_c).key("sm_clock_mean_mhz").value(g.sm_clock_mean_mhz)
          .key("throttled_fraction").value(g.throttled_fraction)
          .key("throttle_reasons").value(describe_throttle_reasons(g.throttle_reasons))
          .key("ecc_uncorrected").value(g.ecc_uncorrected).key("xid_errors").value(g.xid_errors)
          .key("last_xid").value(g.last_xid).key("nvml_errors").value(g.errors);
      if (!g.last_error.empty()) w.key("last_error").value(g.last_error);
      w.end_object();
    }
    w.end_array().key("ranks").begin_array();
    for (const auto& k : r.ranks)
      w.begin_object().key("rank").value(k.rank).key("allreduce_s").value(k.allreduce_s).key("lifetime_s").value(k.lifetime_s)
          .key("share").value(k.share).key("calls").value(k.calls).key("bytes").value(k.bytes).key("stalls").value(k.stalls)
          .end_object();
    w.end_array().key("series").begin_array();
    for (const auto& s : r.series) {
      w.begin_object().key("what").value(s.what).key("t0").value(s.t0).key("dt").value(s.dt).key("values").begin_array();
      for (double v : s.values) w.value(v);
      w.end_array().end_object();
    }
    w.end_array().end_object();
  }
  w.end_array().key("verdicts").strings(verdicts(records)).key("problems").strings(problems).end_object();
  return w.str() + "\n";
}

std::string svg_plot(const std::string& title, const std::vector<NodeStepRecord>& records) {
  static const char* colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};
  const double W = 800, H = 360, L = 60, R = 200, T = 40, B = 50;
  double t_min = 1e300, t_max = -1e300;
  for (const auto& r : records)
    for (const auto& s : r.series)
      if (!s.values.empty()) {
        t_min = std::min(t_min, s.t0);
        t_max = std::max(t_max, s.t0 + s.dt * static_cast<double>(s.values.size()));
      }
  if (t_min > t_max) t_min = 0, t_max = 1;
  const double span = std::max(1e-3, t_max - t_min);
  auto x = [&](double t) { return L + (t - t_min) / span * (W - L - R); };
  auto y = [&](double p) { return T + (1 - std::clamp(p, 0.0, 100.0) / 100) * (H - T - B); };
  auto esc = [](const std::string& s) {
    std::string o;
    for (char c : s) {
      if (c == '<') o += "&lt;";
      else if (c == '>') o += "&gt;";
      else if (c == '&') o += "&amp;";
      else if (c == '"') o += "&quot;";
      else o += c;
    }
    return o;
  };
  std::string o = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fixed(W, 0) +
                  "\" height=\"" + fixed(H, 0) + "\" viewBox=\"0 0 " + fixed(W, 0) + " " + fixed(H, 0) +
                  "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o += "<text x=\"" + fixed(L, 0) + "\" y=\"22\" font-size=\"15\">" + esc(title) + "</text>\n";
  for (int p = 0; p <= 100; p += 25) {
    o += "<line x1=\"" + fixed(L, 1) + "\" y1=\"" + fixed(y(p), 1) + "\" x2=\"" + fixed(W - R, 1) + "\" y2=\"" + fixed(y(p), 1) +
         "\" stroke=\"#ddd\"/>\n<text x=\"" + fixed(L - 6, 1) + "\" y=\"" + fixed(y(p) + 4, 1) + "\" text-anchor=\"end\">" +
         std::to_string(p) + "%</text>\n";
  }
  for (int k = 0; k <= 4; ++k) {
    const double t = t_min + span * k / 4;
    o += "<text x=\"" + fixed(x(t), 1) + "\" y=\"" + fixed(H - B + 18, 1) + "\" text-anchor=\"middle\">" + fixed(t - t_min, 0) +
         " s</text>\n";
  }
  o += "<text x=\"" + fixed((L + W - R) / 2, 1) + "\" y=\"" + fixed(H - 10, 1) + "\" text-anchor=\"middle\">time since the first step started</text>\n";
  std::size_t n = 0;
  for (const auto& r : records)
    for (const auto& s : r.series) {
      if (s.values.empty()) continue;
      const char* c = colours[n % 8];
      std::string pts;
      for (std::size_t i = 0; i < s.values.size(); ++i)
        pts += fixed(x(s.t0 + s.dt * static_cast<double>(i + 1)), 1) + "," + fixed(y(s.values[i]), 1) + " ";
      o += "<polyline fill=\"none\" stroke=\"" + std::string(c) + "\" stroke-width=\"1.5\" points=\"" + pts + "\"/>\n";
      const double ly = T + 16.0 * static_cast<double>(n);
      o += "<rect x=\"" + fixed(W - R + 12, 1) + "\" y=\"" + fixed(ly - 9, 1) + "\" width=\"10\" height=\"10\" fill=\"" + c +
           "\"/>\n<text x=\"" + fixed(W - R + 28, 1) + "\" y=\"" + fixed(ly, 1) + "\">" +
           esc(r.info.job + "." + r.info.step + " " + r.info.node + " " + s.what) + "</text>\n";
      ++n;
    }
  return o + "</svg>\n";
}

}  // namespace saker::telemetry
