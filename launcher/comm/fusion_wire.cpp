#include "launcher/comm/fusion_wire.hpp"

#include <algorithm>
#include <charconv>

#include "common/error.hpp"
#include "saker/comm.hpp"

namespace saker::comm {
namespace fusion_wire {

// One line per pending tensor: name \x1f count \x1f type \x1f op \x1f expired \x1f shape. The first
// line holds the stop flag, then J when the rank has joined. Names may hold anything but
// newlines and \x1f (checked at enqueue).
std::string encode(bool stop, bool joined, const std::vector<std::pair<std::string, Spec>>& items,
                   const std::set<std::string>& expired) {
  std::string s = stop ? "S1" : "S0";
  s += joined ? "J\n" : "\n";
  for (const auto& [name, spec] : items)
    s += name + '\x1f' + std::to_string(spec.count) + '\x1f' + std::to_string(spec.type) + '\x1f' +
         std::to_string(spec.op) + '\x1f' + (expired.count(name) ? '1' : '0') + '\x1f' + spec.shape + '\n';
  return s;
}

namespace {

template <class T>
T field(std::string_view line, std::size_t from, std::size_t to, const std::string& who) {
  T v{};
  auto [end, ec] = std::from_chars(line.data() + from, line.data() + to, v);
  if (ec != std::errc() || end != line.data() + to)
    throw Error(explain("the fusion negotiation from " + who + " is malformed",
                        "a count, type or op is not a number in range",
                        "every rank must run the same Saker version; a rank that sends this is broken or not ours"));
  return v;
}

}  // namespace

RankList decode(std::string_view text, const std::string& from) {
  RankList out;
  auto nl = text.find('\n');
  std::string_view head = text.substr(0, nl);
  out.stop = head.starts_with("S1");
  out.joined = head.size() > 2 && head[2] == 'J';
  while (nl != std::string_view::npos && nl + 1 < text.size()) {
    std::size_t start = nl + 1;
    nl = text.find('\n', start);
    std::string_view line = text.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    auto a = line.find('\x1f'), b = line.find('\x1f', a + 1), c = line.find('\x1f', b + 1);
    auto e = c == std::string_view::npos ? c : line.find('\x1f', c + 1);
    if (e == std::string_view::npos) continue;
    Spec s{field<std::size_t>(line, a + 1, b, from), field<int>(line, b + 1, c, from), field<int>(line, c + 1, e, from), ""};
    if (s.type < 0 || s.type > static_cast<int>(DataType::i64) || s.op < 0 || s.op > static_cast<int>(ReduceOp::avg) ||
        s.count > kMaxTensorBytes / size_of(static_cast<DataType>(s.type)))
      throw Error(explain("the fusion negotiation from " + from + " names a tensor of type " + std::to_string(s.type) +
                              ", op " + std::to_string(s.op) + " and " + std::to_string(s.count) + " elements",
                          "types are 0-5, ops 0-3, and a tensor holds at most 1 TiB",
                          "every rank must run the same Saker version; a rank that sends this is broken or not ours"));
    const auto g = line.find('\x1f', e + 1);  // before the shape (absent from older lines)
    if (g != std::string_view::npos) {
      s.shape = std::string(line.substr(g + 1));
      if (s.shape.size() > kMaxShapeText || s.shape.find_first_not_of("0123456789,") != std::string::npos)
        throw Error(explain("the fusion negotiation from " + from + " gives a shape that is not dimensions",
                            "a shape is at most 256 digits and commas",
                            "every rank must run the same Saker version; a rank that sends this is broken or not ours"));
    }
    const std::string name(line.substr(0, a));
    out.items.emplace_back(name, s);
    out.by_name[name] = s;
    if (line.substr(e + 1, g == std::string_view::npos ? g : g - e - 1) == "1") out.expired.insert(name);
  }
  return out;
}

namespace {

// "fp32 on rank 0, int32 on ranks 1, 2" when the holders' values of a field differ, else "".
template <class F>
std::string differs(const char* field, const std::vector<std::pair<int, Spec>>& holders, F value) {
  std::vector<std::pair<std::string, std::vector<int>>> by_value;  // in order of first appearance
  for (const auto& [rank, spec] : holders) {
    std::string v = value(spec);
    auto it = std::find_if(by_value.begin(), by_value.end(), [&](const auto& p) { return p.first == v; });
    if (it == by_value.end()) it = by_value.insert(by_value.end(), {v, {}});
    it->second.push_back(rank);
  }
  if (by_value.size() < 2) return "";
  std::string s = std::string(field) + " differs:";
  for (std::size_t i = 0; i < by_value.size(); ++i) {
    const auto& ranks = by_value[i].second;
    s += (i ? ", " : " ") + by_value[i].first + (ranks.size() == 1 ? " on rank " : " on ranks ");
    for (std::size_t k = 0; k < ranks.size() && k < 8; ++k) s += (k ? ", " : "") + std::to_string(ranks[k]);
    if (ranks.size() > 8) s += ", ... (" + std::to_string(ranks.size()) + " ranks)";
  }
  return s;
}

std::string shape_text(const std::string& shape) {
  if (shape.empty()) return "(no shape given)";
  std::string s = "[";
  for (char ch : shape) s += ch == ',' ? std::string(", ") : std::string(1, ch);
  return s + "]";
}

}  // namespace

std::string mismatch(const std::string& name, const std::vector<std::pair<int, Spec>>& holders) {
  std::string fields;
  auto add = [&](std::string d) {
    if (!d.empty()) fields += (fields.empty() ? "" : "; ") + d;
  };
  add(differs("type", holders, [](const Spec& s) { return std::string(name_of(static_cast<DataType>(s.type))); }));
  add(differs("op", holders, [](const Spec& s) { return std::string(name_of(static_cast<ReduceOp>(s.op))); }));
  add(differs("element count", holders, [](const Spec& s) { return std::to_string(s.count); }));
  add(differs("shape", holders, [](const Spec& s) { return shape_text(s.shape); }));
  if (fields.empty()) return "";
  return explain("tensor '" + name + "' differs between ranks: " + fields,
                 "one name must carry the same type, op, element count and shape on every rank; the tensor was "
                 "refused before any byte of it moved, rather than one rank's bytes read as another's",
                 "check that the model, its dtype casts and the names given to the collectives are the same on every rank");
}

std::size_t checked_width(const std::vector<std::uint64_t>& lens, const std::function<std::string(int)>& who) {
  std::size_t width = 0;
  for (std::size_t r = 0; r < lens.size(); ++r) {
    if (lens[r] > kMaxListBytes)
      throw Error(explain(who(static_cast<int>(r)) + " announced a fusion negotiation of " + std::to_string(lens[r]) +
                              " bytes",
                          "a pending list holds at most 64 MiB (over half a million tensors)",
                          "every rank must run the same Saker version; a rank that sends this is broken or not ours"));
    width = std::max<std::size_t>(width, lens[r]);
  }
  return width;
}

}  // namespace fusion_wire

}  // namespace saker::comm
