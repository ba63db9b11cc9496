#include "telemetry/sampler.hpp"

#include <algorithm>

#include "telemetry/store.hpp"

namespace saker::telemetry {

StepSampler::StepSampler(SamplerConfig config)
    : config_(std::move(config)), source_(config_.stepd, config_.proc_root, config_.cgroup_root) {
  if (!config_.gpus.empty()) {
    std::string why;
    nvml_ = Nvml::open(&why, config_.nvml_library);
    if (!nvml_) gpu_note_ = why;
  }
}

void StepSampler::sample(double now) {
  if (samples_ == 0) start_ = config_.info.start > 0 ? config_.info.start : now;
  ++samples_;
  if (auto u = source_.read()) {
    // Per-interval utilisation of the allocated CPUs; the first interval runs from the
    // step's start, when its CPU time was zero (slurmstepd and its cgroup are per step).
    const double t0 = last_t_ > 0 ? last_t_ : start_;
    const double dt = now - t0;
    if (dt > 0.05 && config_.info.cpus > 0) {
      const double used = std::max(0.0, u->cpu_seconds - last_cpu_);
      cpu_util_.push_back(std::min(100.0, 100.0 * used / (dt * config_.info.cpus)));
    }
    last_cpu_ = std::max(last_cpu_, u->cpu_seconds);
    rss_hwm_ = std::max({rss_hwm_, u->rss_hwm, u->rss});
    last_usage_ = u;
  }
  if (nvml_) {
    for (const GpuSample& g : nvml_->sample(config_.gpus)) {
      GpuTrack& t = gpus_[g.index];
      ++t.samples;
      t.errors += g.errors;
      if (g.xid_events) {
        t.xids += g.xid_events;
        t.last_xid = g.last_xid;
      }
      if (!g.last_error.empty()) t.last_error = g.last_error;
      if (!g.present) continue;
      ++t.present_samples;
      if (g.util_percent) {
        t.util.push_back(*g.util_percent);
        if (*g.util_percent == 0) ++t.idle;
      }
      if (g.mem_used) t.mem_used_max = std::max(t.mem_used_max, *g.mem_used);
      if (g.mem_total) t.mem_total = *g.mem_total;
      if (g.power_w) {
        if (t.last_t > 0) t.energy_from_power_j += *g.power_w * (now - t.last_t);
        t.power_max = std::max(t.power_max, *g.power_w);
      }
      if (g.energy_mj) {
        if (!t.energy_first) t.energy_first = g.energy_mj;
        t.energy_last = g.energy_mj;
      }
      if (g.temperature_c) t.temp_max = std::max<double>(t.temp_max, *g.temperature_c);
      if (g.sm_clock_mhz) {
        t.clock_sum += *g.sm_clock_mhz;
        ++t.clock_n;
      }
      if (g.throttle_reasons) {
        t.reasons |= *g.throttle_reasons;
        if (*g.throttle_reasons & kThrottleSlowdownMask) ++t.throttled;
      }
      if (g.ecc_uncorrected) {
        if (!t.ecc_first) t.ecc_first = g.ecc_uncorrected;
        t.ecc_last = g.ecc_uncorrected;
      }
      t.last_t = now;
    }
  }
  if (!config_.counters_dir.empty())
    for (const CommCounters& c : read_comm_counters(config_.counters_dir, config_.info.uid)) ranks_[c.rank] = c;
  last_t_ = now;
}

NodeStepRecord StepSampler::summary(double now) const {
  NodeStepRecord r;
  r.info = config_.info;
  r.info.start = start_ > 0 ? start_ : now;
  r.info.end = now;
  r.info.samples = samples_;
  r.info.source = source_.kind();
  if (r.info.gpu_note.empty()) r.info.gpu_note = gpu_note_;
  const double wall = std::max(1e-3, r.info.end - r.info.start);
  r.cpu.cpu_seconds = last_cpu_;
  r.cpu.efficiency = config_.info.cpus ? last_cpu_ / (wall * config_.info.cpus) : 0;
  r.cpu.util = summarize(cpu_util_);
  r.cpu.rss_hwm = rss_hwm_;
  if (last_usage_) {
    r.cpu.mem_limit = last_usage_->mem_limit ? last_usage_->mem_limit : config_.mem_limit;
    r.cpu.read_bytes = last_usage_->io.read;
    r.cpu.write_bytes = last_usage_->io.write;
  } else {
    r.cpu.mem_limit = config_.mem_limit;
  }
  const double dt = config_.info.interval;
  r.series.push_back({"cpu", r.info.start, dt, cpu_util_});
  for (unsigned index : config_.gpus) {
    GpuSummary g;
    g.index = index;
    auto it = gpus_.find(index);
    if (it == gpus_.end()) {
      g.present = false;
      r.gpus.push_back(g);
      continue;
    }
    const GpuTrack& t = it->second;
    g.present = t.present_samples > 0;
    g.util = summarize(t.util);
    g.idle_fraction = t.util.empty() ? 0 : static_cast<double>(t.idle) / static_cast<double>(t.util.size());
    g.mem_used_max = t.mem_used_max;
    g.mem_total = t.mem_total;
    g.energy_j = t.energy_first && t.energy_last && *t.energy_last >= *t.energy_first
                     ? static_cast<double>(*t.energy_last - *t.energy_first) / 1000.0
                     : t.energy_from_power_j;
    g.power_max_w = t.power_max;
    g.temperature_max_c = t.temp_max;
    g.sm_clock_mean_mhz = t.clock_n ? t.clock_sum / t.clock_n : 0;
    g.throttled_fraction = t.present_samples ? static_cast<double>(t.throttled) / t.present_samples : 0;
    g.throttle_reasons = t.reasons;
    g.ecc_uncorrected = t.ecc_first && t.ecc_last && *t.ecc_last >= *t.ecc_first ? *t.ecc_last - *t.ecc_first : 0;
    g.xid_errors = t.xids;
    g.last_xid = t.last_xid;
    g.errors = t.errors;
    g.last_error = t.last_error;
    r.gpus.push_back(g);
    r.series.push_back({"gpu" + std::to_string(index), r.info.start, dt, t.util});
  }
  const auto now_ns = static_cast<std::uint64_t>(now * 1e9);
  for (const auto& [rank, c] : ranks_) {
    RankSummary k;
    k.rank = rank;
    k.calls = c.allreduce_calls;
    k.bytes = c.allreduce_bytes;
    k.stalls = c.stalls;
    k.allreduce_s = static_cast<double>(c.allreduce_ns) / 1e9;
    const std::uint64_t end = c.closed_ns ? c.closed_ns : now_ns;
    k.lifetime_s = end > c.created_ns ? static_cast<double>(end - c.created_ns) / 1e9 : 0;
    k.share = k.lifetime_s > 0 ? std::min(1.0, k.allreduce_s / k.lifetime_s) : 0;
    r.ranks.push_back(k);
  }
  return r;
}

}  // namespace saker::telemetry
