// The fused reduction of the names a cycle found ready: consecutive tensors of one type
// and op packed, segment-major, into the fusion buffer and reduced in one allreduce.
#include "launcher/comm/fusion.hpp"

#include <cstring>

#include "common/json.hpp"

namespace saker::comm {

// Consecutive tensors of one type and op fused up to the fusion buffer's size.
void FusionEngine::reduce_ready(const std::vector<std::pair<std::string, Entry>>& ready) {
  Transport t = comm_.transport;
  std::vector<std::pair<std::string, Entry>> group;
  std::size_t group_bytes = 0;
  for (const auto& item : ready) {
    std::size_t bytes = item.second.count * size_of(item.second.type);
    if (!group.empty() && (group_bytes + bytes > comm_.options.fusion_bytes || item.second.type != group[0].second.type ||
                           item.second.op != group[0].second.op)) {
      reduce_group(group, t);
      group.clear();
      group_bytes = 0;
    }
    group.push_back(item);
    group_bytes += bytes;
  }
  if (!group.empty()) reduce_group(group, t);
}

void FusionEngine::reduce_group(const std::vector<std::pair<std::string, Entry>>& group, Transport t) {
  Core& core = *comm_.fusion;
  const Entry& first = group.front().second;
  std::size_t es = size_of(first.type);
  std::string names;
  for (const auto& g : group) names += (names.empty() ? "" : ",") + g.first;
  std::string args = "{\"tensors\":" + json::quote(names) + "}";
  try {
    if (group.size() == 1) {
      Timeline::Scope s(comm_.timeline.get(), "allreduce " + group[0].first, "op", kTidFusion, args);
      core.allreduce(first.data, first.count, first.type, first.op, t);
    } else {
      // Segment-major layout: segment j of the fused buffer holds segment j of every
      // tensor, so each element is reduced in the same order as an unfused call, and
      // results do not depend on which tensors happened to be fused together.
      int parts = core.ring_size(t);
      std::vector<std::vector<std::size_t>> splits;
      std::size_t total = 0;
      for (const auto& g : group) {
        splits.push_back(Ring::even_split(g.second.count, parts));
        total += g.second.count;
      }
      if (buffer_.size() < total * es) buffer_.resize(total * es);
      std::vector<std::size_t> segs{0};
      auto walk = [&](bool pack) {
        std::size_t off = 0;
        for (int j = 0; j < parts; ++j) {
          for (std::size_t k = 0; k < group.size(); ++k) {
            std::size_t b = splits[k][static_cast<std::size_t>(j)], e = splits[k][static_cast<std::size_t>(j) + 1];
            char* user = static_cast<char*>(group[k].second.data) + b * es;
            if (pack) std::memcpy(buffer_.data() + off * es, user, (e - b) * es);
            else std::memcpy(user, buffer_.data() + off * es, (e - b) * es);
            off += e - b;
          }
          if (pack) segs.push_back(off);
        }
      };
      {
        Timeline::Scope s(comm_.timeline.get(), "fuse", "fuse", kTidFusion, args);
        walk(true);
      }
      {
        Timeline::Scope s(comm_.timeline.get(), "allreduce fused", "op", kTidFusion, args);
        core.allreduce(buffer_.data(), total, first.type, first.op, t, parts > 1 ? segs : std::vector<std::size_t>{});
      }
      Timeline::Scope s(comm_.timeline.get(), "unfuse", "fuse", kTidFusion, args);
      walk(false);
    }
  } catch (...) {
    for (const auto& g : group)
      if (g.second.state) g.second.state->finish(std::current_exception());
    throw;  // the links are broken: stop the fusion thread
  }
  for (const auto& g : group)
    if (g.second.state) g.second.state->finish();  // a joined rank's stand-ins have none
}

}  // namespace saker::comm
