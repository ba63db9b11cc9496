// Atomic publication of files in a checkpoint directory.
//
// A file is written under a temporary name in the target directory (same filesystem, so
// rename is atomic), closed, fsync'ed, renamed to its final name, and the directory is
// fsync'ed so the rename itself survives a power cut. Readers therefore only ever see
// complete files under final names. Temporary names carry the writer's host and pid, so a
// later writer can tell a dead writer's leftovers from a live writer's work in progress.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace saker::ckpt::commit {

// ".NAME.tmp.HOST.PID.RANDOM" in the same directory as `final_path`.
std::filesystem::path temp_path_for(const std::filesystem::path& final_path);
bool is_temp_name(const std::string& filename);

void fsync_path(const std::filesystem::path& path);  // a regular file or a directory
// fsync(temp), rename(temp, final), fsync(directory).
void publish(const std::filesystem::path& temp, const std::filesystem::path& final_path);

// The "latest" pointer: a small file named `latest` holding the main file's name.
inline constexpr const char* kLatestName = "latest";
void write_latest(const std::filesystem::path& dir, const std::string& filename);
std::optional<std::string> read_latest(const std::filesystem::path& dir);

// Removes temporaries whose writer is gone: same host and the pid is dead, or another host
// and older than `other_host_age`. Returns the files removed.
std::vector<std::filesystem::path> remove_stale_temps(const std::filesystem::path& dir,
                                                      std::chrono::seconds other_host_age);

std::string hostname();

}  // namespace saker::ckpt::commit
