// A sweep file and its state directory (sweep/sweep_dir.hpp): loading, ownership, freezing.
#include "sweep/sweep_dir.hpp"

#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>

#include "common/cli.hpp"
#include "common/error.hpp"
#include "sweep/process.hpp"
#include "sweep/state.hpp"

namespace fs = std::filesystem;

namespace saker::sweep {

namespace {

using cli::kConflict, cli::kUnusable;
using Exit = cli::Failure;

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string absolute(const std::string& path) { return fs::absolute(path).lexically_normal().string(); }

// Whose state DIR is: the sweep file recorded in DIR/file ("" : none recorded).
std::string owner_of(const fs::path& dir) { return trim_end(Store(dir).read_file("file")); }

// Whether the state in `dir` may be the file `file`'s: no owner recorded, the file itself
// (by any path), or an owner that no longer exists (the file was moved or renamed).
bool owned_by(const fs::path& dir, const std::string& file) {
  const std::string owner = owner_of(dir);
  std::error_code ec;
  return owner.empty() || owner == absolute(file) || !fs::exists(owner, ec) || fs::equivalent(owner, file, ec);
}

// Lineages outside DIR (checkpoints: on shared storage) are keyed by the name alone:
// CHECKPOINTS/NAME/.saker-sweep-state records the state directory of the sweep whose
// lineages they are, so two sweeps of one name never resume from each other's checkpoints.
// Best effort where this node cannot write there (the trials' nodes make the lineages).
void claim_lineages(const Spec& spec) {
  const fs::path root = spec.checkpoints / spec.name;
  const fs::path inside = root.lexically_relative(spec.dir);
  if (!inside.empty() && *inside.begin() != "..") return;  // in DIR: keyed with it
  const std::string owner = trim_end(slurp(root / ".saker-sweep-state"));
  std::error_code ec;
  if (!owner.empty() && owner != spec.dir.string() && fs::exists(fs::path(owner) / "sweep.yaml", ec) &&
      !fs::equivalent(owner, spec.dir, ec))
    throw Exit{kConflict,
               saker::explain("the lineages in " + root.string() + " are those of the sweep whose state is " + owner,
                              "two sweeps named " + spec.name + " with one checkpoints: would resume from each "
                              "other's checkpoints",
                              "give this sweep another name:, or another checkpoints:")};
  if (owner.empty()) try {
      Store(root).write_file(".saker-sweep-state", spec.dir.string() + "\n");
    } catch (const std::exception&) {
    }
}

}  // namespace

Sweep load_sweep(const std::string& what) {
  if (fs::is_directory(what)) {
    const fs::path copy = fs::path(what) / "sweep.yaml";
    if (!fs::exists(copy))
      throw Exit{kUnusable, saker::explain(what + " is not a sweep directory", "there is no sweep.yaml in it",
                                           "pass the sweep file, or the state directory (dir:) that saker-sweep run "
                                           "or submit filled")};
    const std::string origin = trim_end(slurp(fs::path(what) / "origin"));
    return {load_string(slurp(copy), copy.string(), origin.empty() ? fs::path(what) : fs::path(origin), {}, what), "",
           };
  }
  std::error_code ec;
  if (!fs::exists(what, ec))
    throw Exit{kUnusable, saker::explain("saker-sweep: no sweep file " + what,
                                         "it does not exist (in " + fs::absolute(what).parent_path().string() + ")",
                                         "check the path, or write the file (saker-sweep.yaml(5))")};
  Sweep s{load_file(what), what};
  const Spec& spec = s.spec;
  const std::string text = slurp(what);
  // The old layout: NAME.sweep beside the file, whatever the file's name, without DIR/file.
  // Its state is this file's when its frozen copy is this very text; it is then used as it
  // is (and marked as this file's when the sweep runs again).
  if (spec.dir == default_dir(spec.base, what, spec.name) && !fs::exists(spec.dir)) {
    const fs::path old = spec.base / (spec.name + ".sweep");
    if (old != spec.dir && fs::exists(old / "sweep.yaml", ec)) {
      const std::string owner = owner_of(old);
      if (owner.empty() ? slurp(old / "sweep.yaml") == text : owner == absolute(what) || fs::equivalent(owner, what, ec)) {
        s.spec = load_string(text, what, spec.base, {}, old);  // marked as this file's by freeze
        return s;
      }
    }
  }
  if (!owned_by(spec.dir, what))
    throw Exit{kConflict, saker::explain(
                              spec.dir.string() + " holds the state of sweep file " + owner_of(spec.dir) + ", not of " +
                                  what,
                              "both files name that directory (dir:), and one state cannot hold two sweeps' trials",
                              "give " + what + " a dir: of its own, or pass " + owner_of(spec.dir))};
  return s;
}

Sweep load_sweep_reading(const std::string& what, std::ostream& err) {
  Sweep s = load_sweep(what);
  if (s.file.empty()) return s;
  const std::string frozen = Store(s.spec.dir).read_file("sweep.yaml");
  if (!frozen.empty() && frozen != slurp(s.file))
    err << "saker-sweep: note: " << s.file << " changed since sweep " << s.spec.name
             << " first ran from it: what follows reads the file as it is now; saker-sweep status "
             << s.spec.dir.string() << " reads the copy its trials ran with\n";
  return s;
}

void freeze(const Sweep& s) {
  claim_lineages(s.spec);
  if (s.file.empty()) return;  // run from its directory: the frozen copy itself
  const Spec& spec = s.spec;
  const Store store(spec.dir);
  const std::string text = slurp(s.file), frozen = store.read_file("sweep.yaml");
  if (!frozen.empty() && frozen != text) {
    const bool known = !owner_of(spec.dir).empty();
    throw Exit{kConflict,
               saker::explain("the sweep file " + s.file + " changed since sweep " + spec.name + " first ran from it" +
                                  (known ? "" : " (or another file of that name: first ran in " + spec.dir.string() + ")") +
                                  "; the copy it ran with is " + (spec.dir / "sweep.yaml").string(),
                              "its trials would no longer match the ones already run",
                              "restore the file, or give the changed sweep its own dir: (or another name:), or "
                              "remove " + spec.dir.string() + " to start it over")};
  }
  if (frozen.empty()) {
    store.write_file("sweep.yaml", text);
    store.write_file("origin", spec.base.string() + "\n");
  }
  if (owner_of(spec.dir) != absolute(s.file)) store.write_file("file", absolute(s.file) + "\n");
}

}  // namespace saker::sweep
