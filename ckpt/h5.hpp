// Thin RAII and attribute helpers over the HDF5 C API, so the format code reads as a list
// of what goes where. Every failure becomes a saker::Error naming the file and the object.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace saker::ckpt::h5 {

// Owns one hid_t and closes it with the matching H5*close.
class Id {
 public:
  Id() = default;
  explicit Id(hid_t id) : id_(id) {}
  ~Id() { reset(); }
  Id(Id&& other) noexcept : id_(other.id_) { other.id_ = H5I_INVALID_HID; }
  Id& operator=(Id&& other) noexcept;
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  hid_t get() const { return id_; }
  explicit operator bool() const { return id_ >= 0; }
  void reset();

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// HDF5 prints an error stack on stderr by default; we report errors ourselves.
void silence_error_stack();

// File access properties used for every file: no HDF5 file locking (our files are
// write-once and published by rename, and flock() fails or hangs on many NFS and Lustre
// mounts), the same for files reached through external links, and the HDF5 1.8 object
// format (readable by every HDF5 >= 1.8, and it stores large attributes densely).
Id file_access();

// Truncates; `user_block` bytes at the start are left to us (the manifest), 0: none.
Id create_file(const std::filesystem::path& path, std::uint64_t user_block = 0);
Id open_file(const std::filesystem::path& path);    // read-only
void flush(const Id& file, const std::filesystem::path& path);
Id create_group(const Id& parent, const std::string& name);
Id open_group(const Id& parent, const std::string& name, const std::string& where);
bool exists(const Id& parent, const std::string& name);
std::vector<std::string> children(const Id& group, const std::string& where);
void external_link(const Id& parent, const std::string& name, const std::string& file,
                   const std::string& object);

// Attributes (scalars and 1-D u64 arrays; strings are fixed-length UTF-8).
void set_attr(hid_t obj, const char* name, const std::string& value);
void set_attr(hid_t obj, const char* name, std::uint64_t value);
void set_attr(hid_t obj, const char* name, std::int64_t value);
void set_attr(hid_t obj, const char* name, const std::vector<std::uint64_t>& value);
bool has_attr(hid_t obj, const char* name);
std::string attr_string(hid_t obj, const char* name, const std::string& where);
std::uint64_t attr_u64(hid_t obj, const char* name, const std::string& where);
std::int64_t attr_i64(hid_t obj, const char* name, const std::string& where);
std::vector<std::uint64_t> attr_u64s(hid_t obj, const char* name, const std::string& where);

// Memory/file type used to store a dtype (f16 as a 16-bit IEEE float, bf16 as uint16,
// bool as uint8: the logical dtype is always in the "dtype" attribute).
Id type_for(std::uint8_t dtype);
Id raw_bytes_type();

}  // namespace saker::ckpt::h5
