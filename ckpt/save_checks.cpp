// What a state must satisfy before it is saved, which tensors this rank writes, and the
// residency guard's two rules for a destination (saker/ckpt.hpp: check_destination).
#include <cctype>
#include <set>
#include <string>
#include <typeinfo>
#include <vector>

#include "ckpt/checkpointer_impl.hpp"
#include "ckpt/partition.hpp"
#include "common/error.hpp"
#include "common/log.hpp"

namespace saker::ckpt {
namespace {

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 255 || name == "." || name == "..") return false;
  for (unsigned char c : name)
    if (!(std::isalnum(c) || c == '_' || c == '.' || c == ':' || c == '-')) return false;
  return true;
}

}  // namespace

namespace internal {

void validate(const State& st) {
  if (st.world_size == 0 || st.rank >= st.world_size)
    throw Error(explain("cannot save rank " + std::to_string(st.rank) + " of world size " + std::to_string(st.world_size),
                        "the rank must be below the world size", "set State::rank and State::world_size"));
  std::set<std::string> seen;
  for (const Tensor& t : st.tensors) {
    if (!valid_name(t.name))
      throw Error(explain("bad tensor name '" + t.name + "'", "names use only letters, digits and _ . : -",
                          "rename it, e.g. layer1.weight"));
    if (!seen.insert(t.name).second)
      throw Error(explain("tensor " + t.name + " appears twice", "names must be unique", "rename one of them"));
    if (t.bytes.size() != t.element_count() * dtype_size(t.dtype))
      throw Error(explain("tensor " + t.name + " has " + std::to_string(t.bytes.size()) + " bytes",
                          "its dtype " + std::string(dtype_name(t.dtype)) + " and shape need " +
                              std::to_string(t.element_count() * dtype_size(t.dtype)),
                          "pass the tensor's full bytes"));
    if (t.placement == Placement::partitioned) slice_for(t, st.rank, st.world_size);
  }
}

std::vector<const Tensor*> tensors_to_write(const State& st) {
  std::vector<const Tensor*> out;
  for (const Tensor& t : st.tensors)
    if (st.rank == 0 || t.placement == Placement::partitioned) out.push_back(&t);
  return out;
}

void rethrow_named(const PinnedDir& p, const fs::path& shown) {
  try {
    throw;
  } catch (const Error& e) {
    if (typeid(e) != typeid(Error)) throw;
    std::string what = e.what();
    const std::string from = p.via.string(), to = shown.string();
    for (std::size_t at = what.find(from); at != std::string::npos; at = what.find(from, at + to.size()))
      what.replace(at, from.size(), to);
    throw Error(what);
  }
}

}  // namespace internal

void check_destination(const DestinationGuard& guard, const fs::path& dir, const std::vector<DatasetVersion>& lineage,
                       bool encrypted, std::optional<std::uint64_t> step) {
  const std::string refusing = "saker-ckpt: refusing to save " +
                               (step ? "step " + std::to_string(*step) : std::string("checkpoints"));
  try {
    guard.check(dir, lineage);
  } catch (const std::exception& e) {
    throw DestinationRefused(refusing + " to " + dir.string() + ": " + e.what());
  }
  bool required = true;  // fail closed: a guard that cannot decide requires encryption
  try {
    required = guard.require_encryption(lineage);
  } catch (const std::exception& e) {
    log::warn(std::string("ckpt: the policy could not decide whether encryption is required (") + e.what() +
              "); requiring it");
  }
  if (required && !encrypted)
    throw DestinationRefused(explain(refusing + " unencrypted to " + dir.string(),
                                     "the policy requires encryption for a model trained on " + format_lineage(lineage),
                                     "give a 0600 key file (Options::key_file; saker-train --ckpt-key)"));
}

void Checkpointer::check_destination(const State& state) const {
  if (!options_.guard) return;
  const auto pinned = pin_directory(dir_);
  ckpt::check_destination(*options_.guard, pinned->real, state.lineage, impl_->key.has_value(), state.step);
  confirm_pinned(*pinned, dir_);
}

}  // namespace saker::ckpt
