// Tensors, dtypes and lineage: the plain data types of the public API.
#include <algorithm>
#include <cctype>

#include "common/error.hpp"
#include "saker/ckpt.hpp"

namespace saker::ckpt {
namespace {

struct DTypeRow {
  DType dtype;
  const char* name;
  std::size_t size;
};
constexpr DTypeRow kDTypes[] = {
    {DType::f16, "float16", 2}, {DType::bf16, "bfloat16", 2}, {DType::f32, "float32", 4},
    {DType::f64, "float64", 8}, {DType::i8, "int8", 1},       {DType::i16, "int16", 2},
    {DType::i32, "int32", 4},   {DType::i64, "int64", 8},     {DType::u8, "uint8", 1},
    {DType::u16, "uint16", 2},  {DType::u32, "uint32", 4},    {DType::u64, "uint64", 8},
    {DType::boolean, "bool", 1},
};

const DTypeRow& row(DType d) {
  for (const auto& r : kDTypes)
    if (r.dtype == d) return r;
  assert_failed("known dtype", __FILE__, __LINE__, "DType value out of range");
}

}  // namespace

std::size_t dtype_size(DType dtype) { return row(dtype).size; }
std::string_view dtype_name(DType dtype) { return row(dtype).name; }

DType dtype_from_name(std::string_view name) {
  for (const auto& r : kDTypes)
    if (name == r.name) return r.dtype;
  throw Error(explain("unknown dtype '" + std::string(name) + "'",
                      "Saker knows float16, bfloat16, float32, float64, int8..int64, uint8..uint64 and bool",
                      "use one of those names"));
}

std::uint64_t Tensor::element_count() const {
  std::uint64_t n = 1;
  for (std::uint64_t d : shape) n *= d;
  return n;
}

void Tensor::check_element_size(std::size_t size) const {
  if (size != dtype_size(dtype))
    throw Error(explain("tensor " + name + " viewed with a " + std::to_string(size) + "-byte type",
                        "its dtype " + std::string(dtype_name(dtype)) + " has " + std::to_string(dtype_size(dtype)) +
                            "-byte elements",
                        "use a matching element type"));
}

Tensor Tensor::view(std::string name, DType dtype, std::vector<std::uint64_t> shape, std::span<const std::byte> bytes,
                    Placement placement) {
  Tensor t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.placement = placement;
  t.bytes = bytes;
  return t;
}

Tensor Tensor::owning(std::string name, DType dtype, std::vector<std::uint64_t> shape, std::vector<std::byte> bytes,
                      Placement placement) {
  auto storage = std::make_shared<std::vector<std::byte>>(std::move(bytes));
  Tensor t = view(std::move(name), dtype, std::move(shape), *storage, placement);
  t.storage = std::move(storage);
  return t;
}

const Tensor* State::find(std::string_view name) const {
  auto it = std::find_if(tensors.begin(), tensors.end(), [&](const Tensor& t) { return t.name == name; });
  return it == tensors.end() ? nullptr : &*it;
}

Access parse_access(std::string_view mode) {
  if (mode.empty() || mode == "0600" || mode == "600") return Access::owner;
  if (mode == "0640" || mode == "640") return Access::group;
  throw Error(explain("bad checkpoint mode '" + std::string(mode) + "'", "checkpoints are written 0600, or 0640 by choice",
                      "give 0600 or 0640 (SAKER_CKPT_MODE, saker-train --ckpt-mode)"));
}

unsigned file_mode(Access a) { return a == Access::group ? 0640u : 0600u; }
unsigned directory_mode(Access a) { return a == Access::group ? 0750u : 0700u; }

std::vector<DatasetVersion> parse_lineage(std::string_view text) {
  std::vector<DatasetVersion> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string item(text.substr(pos, comma - pos));
    const std::size_t at = item.find('@');
    DatasetVersion d{item.substr(0, at), at == std::string::npos ? "" : item.substr(at + 1)};
    const auto bad = [](const std::string& s) {
      return std::any_of(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c) || c == '@' || c == ','; });
    };
    if (d.name.empty() || bad(d.name) || bad(d.version) || (at != std::string::npos && d.version.empty()))
      throw Error(explain("bad lineage entry '" + item + "'", "expected NAME[@VERSION]", "write e.g. imagenet@2012,patients@v3"));
    out.push_back(std::move(d));
    pos = comma + 1;
  }
  return out;
}

std::string format_lineage(const std::vector<DatasetVersion>& lineage) {
  std::string out;
  for (const auto& d : lineage) out += (out.empty() ? "" : ",") + d.str();
  return out;
}

}  // namespace saker::ckpt
