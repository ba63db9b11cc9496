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

// A new, empty file of this user with exactly `mode` (ckpt::file_mode): O_CREAT|O_EXCL|
// O_NOFOLLOW, so never a file or a symbolic link someone else planted, then fchmod against
// the umask. Writers (HDF5 included) open it afterwards; the mode stays. Throws saker::Error.
void create_private(const std::filesystem::path& path, unsigned mode);
// Creates `dir` and its missing parents with exactly `mode` (ckpt::directory_mode);
// directories that exist are left as they are. Throws saker::Error naming the directory.
void make_directories(const std::filesystem::path& dir, unsigned mode);

void fsync_path(const std::filesystem::path& path);  // a regular file or a directory
// fsync(temp), rename(temp, final), fsync(directory).
void publish(const std::filesystem::path& temp, const std::filesystem::path& final_path);

// The "latest" pointer: a small file named `latest` holding the main file's name.
inline constexpr const char* kLatestName = "latest";
void write_latest(const std::filesystem::path& dir, const std::string& filename, unsigned mode);
std::optional<std::string> read_latest(const std::filesystem::path& dir);

// Removes temporaries whose writer is gone: same host and the pid is dead, or another host
// and older than `other_host_age`. Returns the files removed.
std::vector<std::filesystem::path> remove_stale_temps(const std::filesystem::path& dir,
                                                      std::chrono::seconds other_host_age);

std::string hostname();

}  // namespace saker::ckpt::commit
