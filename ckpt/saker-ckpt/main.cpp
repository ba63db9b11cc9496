// saker-ckpt: inspect, verify and prune Saker checkpoints (a thin shell over libsaker_ckpt).
//
//   saker-ckpt ls DIR [--quick]
//   saker-ckpt show FILE
//   saker-ckpt verify DIR|FILE... [--policy FILE]
//   saker-ckpt prune DIR --keep K [--keep-every M]
//   saker-ckpt provenance FILE [--verify --pubkey FILE [--search DIR]...]
//   saker-ckpt find --dataset NAME[@VERSION] DIR... [--json]
//
// Exit codes (saker(7)): 0 success, 1 damage found (verify, ls, show), 2 bad usage,
// 3 cannot read/act, 4 a checkpoint stored against the site policy (verify --policy).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <string>
#include <vector>

#include "ckpt/find.hpp"
#include "ckpt/policy_guard.hpp"
#include "ckpt/provenance_export.hpp"
#include "common/error.hpp"
#include "common/cli.hpp"
#include "common/log.hpp"
#include "common/utc_time.hpp"
#include "saker/ckpt.hpp"

namespace cli = saker::cli;
namespace ck = saker::ckpt;
namespace fs = std::filesystem;

namespace {

constexpr int kOk = cli::kOk, kDamaged = cli::kFailed, kFailed = cli::kUnusable, kAgainstPolicy = cli::kConflict;

const cli::Tool& tool() {
  static const cli::Option kProgress{"progress", "", "progress on stderr even when it is not a terminal"};
  static const cli::Option kKey{"key", "FILE", "AES-256 key file: also checks authenticity and decryption, as a resume does"};
  static const cli::Tool t{
      "saker-ckpt",
      "inspect, verify, prune and trace Saker checkpoints",
      {{"ls", "DIR [--quick] [--key FILE] [--progress]",
        "one line per committed checkpoint: step, creation time (UTC), size, shards and status (ok, or DAMAGED and "
        "why); checks every checksum unless --quick",
        {{"quick", "", "skip checksum verification"}, kKey, kProgress}, 1, 1, "checkpoint directory DIR"},
       {"show", "FILE",
        "metadata (step, epoch, world size, version, encryption), lineage, provenance, the config record and every "
        "tensor (shard, dtype, shape, placement, bytes, xxh3-128)",
        {}, 1, 1, "checkpoint FILE"},
       {"verify", "DIR|FILE... [--policy FILE] [--key FILE] [--progress]",
        "read every shard of every checkpoint given (a directory: all of them) and check every checksum (no key "
        "needed); --policy: also where each may be stored and whether it must be encrypted (REFUSED), and a WARNING "
        "when group or others may read restricted data",
        {{"policy", "FILE", "site policy (saker-policy.yaml(5)) the checkpoints must obey"}, kKey, kProgress}, 1, 4096,
        "checkpoint DIR or FILE"},
       {"prune", "DIR --keep K [--keep-every M] [--dry-run] [--progress]",
        "keep the newest K checkpoints that verify and every verified one whose step is a multiple of M; remove the "
        "rest (damaged ones never count toward K; nothing is removed when none verifies)",
        {{"keep", "K", "checkpoints to keep, newest first (1 or more)"},
         {"keep-every", "M", "also keep steps that are multiples of M"},
         {"dry-run", "", "show what would be removed, remove nothing"},
         kProgress},
        1, 1, "checkpoint directory DIR"},
       {"provenance", "FILE [--verify --pubkey FILE [--search DIR]...]",
        "the checkpoint's provenance as an in-toto Statement v1 with a SLSA Provenance v1 predicate; --verify checks "
        "the chain instead: checksums, the attestation's signature under the site key, agreement, and the parents",
        {{"verify", "", "check the chain instead of printing it"},
         {"pubkey", "FILE", "the site's attestation public key (PEM), for --verify"},
         {"search", "DIR", "a directory of checkpoints to find parents in, for --verify (repeatable)", true}},
        1, 1, "checkpoint FILE"},
       {"find", "--dataset NAME[@VERSION] DIR... [--json]",
        "every checkpoint under DIR... derived from a dataset: named by its attestation or its lineage, or "
        "descended from one that is (resume, fine-tune, sweep trial) through parent digests",
        {{"dataset", "NAME[@VERSION]", "the dataset; without a version, every version"},
         {"json", "", "one JSON object instead of the lines"}},
        1, 4096, "directory DIR"}},
      "Progress goes to stderr when it is a terminal (or with --progress).\n"
      "Exit codes (saker(7)): 0 success, 1 a damaged checkpoint was found (provenance --verify: the chain does\n"
      "not verify), 2 bad usage, 3 cannot read or act, 4 (verify --policy) a checkpoint is stored against the\n"
      "site policy (and none is damaged).\n"};
  return t;
}

// The string value of "key" in a flat JSON object as Python's json.dumps writes it; "" if
// absent. Escapes other than \" and \\ are kept as written (show only prints it).
std::string json_string_field(const std::string& json, const std::string& key) {
  const std::string head = "\"" + key + "\": \"";
  std::size_t at = json.find(head);
  if (at == std::string::npos) return "";
  std::string value;
  for (at += head.size(); at < json.size() && json[at] != '"'; ++at) {
    if (json[at] == '\\' && at + 1 < json.size() && (json[at + 1] == '"' || json[at + 1] == '\\')) ++at;
    value += json[at];
  }
  return value;
}

// A saker.torch checkpoint's config holds its optimizer and extra state as a base64 pickle
// ("meta"): show its summary and what it is, never the pickle itself (issue 31 §8).
std::string config_text(const std::string& config) {
  if (config.empty()) return "(empty)";
  if (config.rfind("{\"format\": \"saker.torch/", 0) != 0) return config;
  const std::string summary = json_string_field(config, "summary");
  return json_string_field(config, "format") + ": PyTorch state pickled by saker.torch.checkpoint (" +
         std::to_string(json_string_field(config, "meta").size() * 3 / 4) + " bytes; load_latest() reads it)" +
         (summary.empty() ? "" : "\n                " + summary);
}

std::string human_bytes(std::uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}


std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// Progress on stderr for a run over several checkpoints: the file's own percentage, which
// file of how many, and an ETA for the whole run (from the time so far and the share done:
// each file counts as one Nth, its bytes read as part of that Nth). Redrawn at most every
// 1% of a file; finish() ends the line whether the file verified or not.
class Meter {
 public:
  Meter(bool enabled, std::size_t files) : enabled_(enabled), files_(files), start_(std::chrono::steady_clock::now()) {}

  ck::Progress for_file(std::size_t index, const std::string& label) {
    if (!enabled_) return {};
    auto last = std::make_shared<int>(-1);
    return [this, index, label, last](std::uint64_t done, std::uint64_t total) {
      const double part = total == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total);
      const int pct = static_cast<int>(part * 100);
      if (pct == *last) return;
      *last = pct;
      const double share = (static_cast<double>(index) + part) / static_cast<double>(std::max<std::size_t>(files_, 1));
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      std::string eta = "ETA --";
      if (share > 0.01 && elapsed > 0.5) eta = "ETA " + std::to_string(static_cast<long>(elapsed / share * (1 - share) + 0.5)) + " s";
      std::fprintf(stderr, "\r[%zu/%zu] %s: %3d%% (%s of %s), all %3d%%, %s   ", index + 1, files_, label.c_str(), pct,
                   human_bytes(done).c_str(), human_bytes(total).c_str(), static_cast<int>(share * 100), eta.c_str());
    };
  }
  void finish() const {
    if (enabled_) std::fputc('\n', stderr);
  }

 private:
  bool enabled_;
  std::size_t files_;
  std::chrono::steady_clock::time_point start_;
};

std::vector<fs::path> checkpoints_in(const fs::path& target) {
  if (fs::is_directory(target)) return ck::list_checkpoints(target);
  if (!fs::exists(target))
    throw saker::Error(saker::explain(target.string() + " does not exist", "no such file or directory",
                                      "give a checkpoint directory or a ckpt-*.h5 file"));
  return {target};
}

int cmd_ls(const fs::path& dir, bool quick, bool progress, const std::string& key_file) {
  if (!fs::is_directory(dir))
    throw saker::Error(saker::explain(dir.string() + " is not a directory", "ls lists a checkpoint directory",
                                      "give the directory passed to the trainer"));
  // Sorted by the step in the file name (list_checkpoints); a damaged row keeps its
  // place and its columns, with "?" for what could not be read.
  const auto files = ck::list_checkpoints(dir);
  struct Row {
    std::string step, created, size, shards, status;
  };
  // Fixed widths known before any file is read, so each row goes out (flushed) as soon
  // as it is judged: steps as wide as the widest name's, ISO times, sizes like "1023.9 GiB".
  std::size_t w_step = 4;
  for (const fs::path& f : files) w_step = std::max(w_step, std::to_string(ck::step_in_name(f)).size());
  const int ws = static_cast<int>(w_step), wc = 20, wz = 10;
  std::printf("%*s  %-*s  %*s  %6s  %s\n", ws, "STEP", wc, "CREATED", wz, "SIZE", "SHARDS", "STATUS");
  int rc = kOk;
  Meter meter(progress && !quick, files.size());
  for (std::size_t i = 0; i < files.size(); ++i) {
    const fs::path& f = files[i];
    Row row;
    row.step = std::to_string(ck::step_in_name(f));
    row.status = quick ? "unverified" : "ok";
    try {
      const ck::CheckpointInfo info = ck::describe(f);
      row.created = saker::utc_iso(info.created_unix);
      row.size = human_bytes(info.bytes);
      row.shards = std::to_string(info.world_size);
      if (!quick) {
        const ck::Verdict v = ck::verify(f, meter.for_file(i, f.filename().string()), key_file);
        meter.finish();
        if (!v.ok) row.status = "DAMAGED: " + v.problem, rc = kDamaged;
      }
    } catch (const std::exception& e) {
      std::error_code ec;
      const auto size = fs::file_size(f, ec);
      row.created = "?";
      row.size = human_bytes(ec ? 0 : size);
      row.shards = "?";
      row.status = std::string("DAMAGED: ") + e.what();
      rc = kDamaged;
    }
    std::printf("%*s  %-*s  %*s  %6s  %s\n", ws, row.step.c_str(), wc, row.created.c_str(), wz, row.size.c_str(),
                row.shards.c_str(), row.status.c_str());
    std::fflush(stdout);
  }
  if (files.empty()) std::fprintf(stderr, "saker-ckpt: no committed checkpoints in %s\n", dir.c_str());
  return rc;
}

// The provenance record in a few lines (not verified: saker-ckpt provenance --verify does that).
void show_provenance(const ck::CheckpointInfo& info) {
  if (info.provenance.empty()) {
    std::printf("provenance:     (none recorded)\n");
    return;
  }
  const auto r = ck::provenance::decode(info.provenance, info.file.string());
  std::string datasets;
  for (const auto& d : r.enforced) datasets += (datasets.empty() ? "" : ",") + d;
  if (r.attestation.empty())
    std::printf("attestation:    none (%s)\n", r.attestation_note.c_str());
  else
    std::printf("attestation:    job %s step %s, enforced datasets %s (unverified; saker-ckpt provenance --verify)\n",
                r.job_id.c_str(), r.step_id.c_str(), datasets.empty() ? "(none)" : datasets.c_str());
  std::printf("code:           %s%s%s\n", r.code.path.c_str(), r.code.sha256.empty() ? "" : (" sha256 " + r.code.sha256).c_str(),
              r.code.git_commit.empty() ? "" : (" git " + r.code.git_commit).c_str());
  for (const auto& p : r.parents)
    std::printf("parent:         sha256 %s (run %s step %" PRIu64 ")\n", p.sha256.c_str(), p.run_id.c_str(), p.step);
}

// show's FILE: a checkpoint file, not a directory, and one that exists; a file that is
// there but cannot be read as a checkpoint is damaged (exit 1), with describe's reason.
ck::CheckpointInfo describe_for_show(const fs::path& file) {
  std::error_code ec;
  const auto status = fs::status(file, ec);
  if (!fs::exists(status))
    throw cli::Failure(kFailed, saker::explain("saker-ckpt show: " + file.string() + " does not exist", "no such file",
                                               "give a ckpt-*.h5 file; saker-ckpt ls DIR lists a directory's"));
  if (fs::is_directory(status))
    throw cli::Failure(kFailed, saker::explain("saker-ckpt show: " + file.string() + " is a directory",
                                               "show describes one checkpoint file",
                                               "saker-ckpt ls " + file.string() + " lists its checkpoints; then show one"));
  try {
    return ck::describe(file);
  } catch (const saker::Error& e) {
    throw cli::Failure(kDamaged, std::string("saker-ckpt show: ") + e.what());
  }
}

int cmd_show(const fs::path& file) {
  const ck::CheckpointInfo info = describe_for_show(file);
  std::printf("file:           %s\n", info.file.c_str());
  std::printf("step:           %" PRIu64 "\n", info.step);
  std::printf("epoch:          %" PRIu64 "\n", info.epoch);
  std::printf("world size:     %" PRIu32 "\n", info.world_size);
  std::printf("created:        %s\n", saker::utc_iso(info.created_unix).c_str());
  std::printf("saker version:  %s (format %" PRIu32 ")\n", info.saker_version.c_str(), info.format_version);
  std::printf("size:           %s\n", human_bytes(info.bytes).c_str());
  std::printf("encryption:     %s%s\n", info.encryption.c_str(),
              info.key_id.empty() ? "" : (" (key id " + info.key_id + ")").c_str());
  std::printf("lineage:        %s\n", info.lineage.empty() ? "(none recorded)" : ck::format_lineage(info.lineage).c_str());
  std::printf("config:         %s\n", config_text(info.config).c_str());
  show_provenance(info);
  std::printf("tensors:        %zu\n", info.tensors.size());
  std::printf("  %-5s  %-32s  %-8s  %-18s  %-24s  %10s  %s\n", "SHARD", "NAME", "DTYPE", "SHAPE", "PLACEMENT", "BYTES",
              "XXH3-128");
  for (const ck::TensorInfo& t : info.tensors) {
    std::string placement = t.placement == ck::Placement::replicated ? "replicated" : "partitioned";
    if (t.placement == ck::Placement::partitioned)
      placement += " " + std::to_string(t.offset) + "/" + shape_text(t.global_shape);
    if (t.encrypted) placement += " enc";
    std::printf("  %-5" PRIu32 "  %-32s  %-8s  %-18s  %-24s  %10" PRIu64 "  %s\n", t.shard, t.name.c_str(),
                std::string(ck::dtype_name(t.dtype)).c_str(), shape_text(t.shape).c_str(), placement.c_str(),
                t.stored_bytes, t.xxh3_128.c_str());
  }
  return kOk;
}

// Where the checkpoint lies and how it is stored, judged by the site policy: "" when allowed.
std::string policy_problem(const ck::DestinationGuard& guard, const fs::path& file) {
  const ck::CheckpointInfo info = ck::describe(file);
  try {
    ck::check_destination(guard, file.parent_path(), info.lineage, info.encryption != "none", info.step);
  } catch (const ck::DestinationRefused& e) {
    return e.what();
  }
  return {};
}

// A checkpoint of restricted data (by the site policy) that group or others may read: one
// warning line per such file, the exit code unchanged. Written 0600 by default, so this is
// a copy, a chmod, or a save with the explicit 0640 choice.
void warn_if_readable(const ck::DestinationGuard& guard, const fs::path& file) {
  for (const std::string& line : ck::exposure_warnings(guard, file)) std::printf("WARNING  %s\n", line.c_str());
}

int cmd_verify(const std::vector<std::string>& targets, bool progress, const ck::DestinationGuard* guard,
               const std::string& key_file) {
  int rc = kOk;
  std::size_t checked = 0;
  std::vector<fs::path> files;  // all of them first, so that progress knows how many
  for (const std::string& target : targets) {
    const auto found = checkpoints_in(target);
    files.insert(files.end(), found.begin(), found.end());
  }
  Meter meter(progress, files.size());
  {
    for (const fs::path& f : files) {
      const ck::Verdict v = ck::verify(f, meter.for_file(checked, f.filename().string()), key_file);
      meter.finish();
      ++checked;
      const std::string refused = v.ok && guard != nullptr ? policy_problem(*guard, f) : std::string();
      if (!refused.empty()) {
        std::printf("REFUSED  %s: %s\n", f.c_str(), refused.c_str());
        if (rc == kOk) rc = kAgainstPolicy;
      } else if (v.ok) {
        std::printf("ok       %s\n", f.c_str());
      } else {
        std::printf("DAMAGED  %s: %s\n", f.c_str(), v.problem.c_str());
        rc = kDamaged;
      }
      if (v.ok && guard != nullptr) warn_if_readable(*guard, f);
      std::fflush(stdout);  // each verdict is out before the next (possibly long) check
    }
  }
  if (checked == 0) {
    std::fprintf(stderr, "saker-ckpt verify: no checkpoints found in %s\n", targets.front().c_str());
    return kFailed;
  }
  return rc;
}

int cmd_prune(const fs::path& dir, std::uint32_t keep, std::uint64_t keep_every, bool dry_run, bool progress) {
  if (!fs::is_directory(dir))
    throw saker::Error(saker::explain(dir.string() + " is not a directory", "prune works on a checkpoint directory",
                                      "give the directory passed to the trainer"));
  ck::PruneOptions o;
  o.keep_last = keep;
  o.keep_every = keep_every;
  o.dry_run = dry_run;
  o.full_verify = true;  // only checkpoints that verify (every byte) count toward --keep
  std::unique_ptr<Meter> meter;
  if (progress)
    o.progress = [&](std::size_t index, std::size_t count, const fs::path& main) {
      if (!meter) meter = std::make_unique<Meter>(true, count);
      return meter->for_file(index, main.filename().string());
    };
  const ck::PruneReport r = ck::prune(dir, o);
  if (meter) meter->finish();
  for (const std::string& d : r.damaged) std::printf("DAMAGED  %s\n", d.c_str());
  for (const fs::path& f : r.removed) std::printf("%s  %s\n", dry_run ? "would remove" : "removed", f.c_str());
  std::printf("%zu file(s) %s, %zu checkpoint(s) kept\n", r.removed.size(), dry_run ? "would be removed" : "removed",
              r.kept.size());
  return kOk;
}

int cmd_provenance(const std::string& file, bool check, const std::string& pubkey_file,
                   const std::vector<std::string>& search) {
  if (!check) {
    std::printf("%s\n", ck::provenance::statement_json(file).c_str());
    return kOk;
  }
  const auto key = saker::provenance::read_public_key(pubkey_file);
  const auto result = ck::provenance::verify_chain(file, key, {search.begin(), search.end()});
  for (const auto& c : result.checked) std::printf("ok        %s\n", c.c_str());
  for (const auto& p : result.problems) std::printf("FAILED    %s\n", p.c_str());
  std::printf("%s: %zu checkpoint(s) verified against site key %s..., %zu problem(s)\n", result.ok() ? "verified" : "NOT VERIFIED",
              result.checked.size(), key.key_id.substr(0, 16).c_str(), result.problems.size());
  return result.ok() ? kOk : kDamaged;
}

int cmd_find(const cli::Args& a) {
  std::vector<saker::policy::DatasetRef> query;
  try {
    query = saker::policy::parse_dataset_list(a.required("dataset"));
  } catch (const cli::UsageError&) {
    throw;
  } catch (const saker::Error& e) {
    throw cli::UsageError(a.command + ": --dataset: " + e.what());
  }
  if (query.size() != 1)
    throw cli::UsageError(saker::explain(a.command + ": --dataset names " + std::to_string(query.size()) + " datasets",
                                         "the question is about one", "run it once per dataset"));
  const auto r = ck::find::derived_from({a.positional.begin(), a.positional.end()}, query[0]);
  std::cout << (a.has("json") ? ck::find::json(query[0], r) : ck::find::table(query[0], r));
  // Erasure asks for all of them: one that could not be judged is not a clean answer.
  return r.unreadable.empty() ? kOk : kDamaged;
}

int run(const cli::Command& c, const cli::Args& a) {
  const bool progress = a.has("progress") || ::isatty(STDERR_FILENO) != 0;
  const std::string& first = a.positional.at(0);
  saker::log::set_level(saker::log::Level::warn);
  try {
    if (c.name == "ls") return cmd_ls(first, a.has("quick"), progress && !a.has("quick"), a.get("key"));
    if (c.name == "show") return cmd_show(first);
    if (c.name == "find") return cmd_find(a);
    if (c.name == "provenance") {
      if (!a.has("verify") && (a.has("pubkey") || a.has("search")))
        throw cli::UsageError(saker::explain("saker-ckpt provenance: --pubkey and --search go with --verify", "",
                                             "add --verify to check the chain"));
      return cmd_provenance(first, a.has("verify"), a.has("verify") ? a.required("pubkey") : "", a.all("search"));
    }
    if (c.name == "verify") {
      std::shared_ptr<const ck::PolicyGuard> guard;
      if (a.has("policy")) guard = ck::PolicyGuard::from_file(a.get("policy"));
      return cmd_verify(a.positional, progress, guard.get(), a.get("key"));
    }
    if (!a.has("keep"))
      throw cli::UsageError(saker::explain("saker-ckpt prune: --keep is missing", "prune must know how many to keep",
                                           "pass --keep K (1 or more)"));
    return cmd_prune(first, static_cast<std::uint32_t>(a.number("keep", 0, 1, UINT32_MAX)), a.number("keep-every", 0),
                     a.has("dry-run"), progress);
  } catch (const cli::UsageError&) {
    throw;
  } catch (const cli::Failure&) {
    throw;
  } catch (const std::exception& e) {
    throw cli::Failure(kFailed, a.command + ": " + e.what());
  }
}

}  // namespace

int main(int argc, char** argv) { return cli::main(tool(), argc, argv, run, std::cout, std::cerr); }
