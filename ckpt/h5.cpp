#include "ckpt/h5.hpp"

#include <algorithm>


#include "common/error.hpp"
#include "saker/ckpt.hpp"

namespace saker::ckpt::h5 {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& why) {
  throw Error(explain(what, why, "check that the file is a complete Saker checkpoint (saker-ckpt verify)"));
}

void check(herr_t rc, const std::string& what) {
  if (rc < 0) fail(what, "HDF5 call failed");
}

hid_t check_id(hid_t id, const std::string& what) {
  if (id < 0) fail(what, "HDF5 call failed");
  return id;
}

}  // namespace

Id& Id::operator=(Id&& other) noexcept {
  if (this != &other) {
    reset();
    id_ = other.id_;
    other.id_ = H5I_INVALID_HID;
  }
  return *this;
}

void Id::reset() {
  if (id_ < 0) return;
  switch (H5Iget_type(id_)) {
    case H5I_FILE: H5Fclose(id_); break;
    case H5I_GROUP: H5Gclose(id_); break;
    case H5I_DATASET: H5Dclose(id_); break;
    case H5I_DATASPACE: H5Sclose(id_); break;
    case H5I_DATATYPE: H5Tclose(id_); break;
    case H5I_ATTR: H5Aclose(id_); break;
    case H5I_GENPROP_LST: H5Pclose(id_); break;
    default: break;
  }
  id_ = H5I_INVALID_HID;
}

void silence_error_stack() {
  // The automatic error printing is per thread in thread-safe HDF5 builds.
  static thread_local bool silenced = false;
  if (!silenced) H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  silenced = true;
}

Id file_access() {
  silence_error_stack();
  Id fapl(check_id(H5Pcreate(H5P_FILE_ACCESS), "HDF5 file access properties"));
  check(H5Pset_file_locking(fapl.get(), false, true), "disable HDF5 file locking");
  check(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18), "HDF5 format bounds");
  // Whole-file reads and writes of big contiguous datasets go straight through; a 1 MiB
  // sieve buffer keeps the many small metadata writes together.
  check(H5Pset_sieve_buf_size(fapl.get(), 1 << 20), "HDF5 sieve buffer");
  // Tensor data of 64 KiB and more starts on a 4 KiB page boundary: whole-page writes and
  // reads, no read-modify-write of pages shared with metadata.
  check(H5Pset_alignment(fapl.get(), 64 << 10, 4096), "HDF5 alignment");
  return fapl;
}

Id create_file(const std::filesystem::path& path, std::uint64_t user_block) {
  Id fapl = file_access();
  Id fcpl(check_id(H5Pcreate(H5P_FILE_CREATE), "HDF5 file creation properties"));
  if (user_block > 0) check(H5Pset_userblock(fcpl.get(), user_block), "HDF5 user block");
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get());
  if (f < 0)
    throw Error(explain("cannot create " + path.string(), "HDF5 could not create the file",
                        "check that the directory exists, is writable and has free space"));
  return Id(f);
}

Id open_file(const std::filesystem::path& path) {
  Id fapl = file_access();
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get());
  if (f < 0)
    throw Error(explain("cannot open " + path.string(),
                        "not a readable HDF5 file (missing, truncated or damaged)",
                        "use another checkpoint; saker-ckpt verify tells which are intact"));
  return Id(f);
}

void flush(const Id& file, const std::filesystem::path& path) {
  if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0)
    throw Error(explain("cannot flush " + path.string(), "HDF5 flush failed", "check free space and I/O errors (dmesg)"));
}

Id create_group(const Id& parent, const std::string& name) {
  return Id(check_id(H5Gcreate2(parent.get(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                     "create group " + name));
}

Id open_group(const Id& parent, const std::string& name, const std::string& where) {
  Id lapl(check_id(H5Pcreate(H5P_LINK_ACCESS), "link access properties"));
  Id fapl = file_access();
  check(H5Pset_elink_fapl(lapl.get(), fapl.get()), "external link file access");
  hid_t g = H5Gopen2(parent.get(), name.c_str(), lapl.get());
  if (g < 0) fail(where + ": cannot open group " + name, "missing, or its shard file is missing or unreadable");
  return Id(g);
}

bool exists(const Id& parent, const std::string& name) {
  return H5Lexists(parent.get(), name.c_str(), H5P_DEFAULT) > 0;
}

std::vector<std::string> children(const Id& group, const std::string& where) {
  H5G_info_t info;
  check(H5Gget_info(group.get(), &info), where + ": list members");
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    ssize_t n = H5Lget_name_by_idx(group.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (n < 0) fail(where, "cannot read a member name");
    std::string name(static_cast<std::size_t>(n), '\0');
    H5Lget_name_by_idx(group.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size() + 1, H5P_DEFAULT);
    names.push_back(std::move(name));
  }
  return names;
}

void external_link(const Id& parent, const std::string& name, const std::string& file,
                   const std::string& object) {
  check(H5Lcreate_external(file.c_str(), object.c_str(), parent.get(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT),
        "external link " + name + " -> " + file);
}

// ---------------------------------------------------------------- attributes

namespace {

Id string_type() {
  Id t(H5Tcopy(H5T_C_S1));
  H5Tset_size(t.get(), H5T_VARIABLE);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  return t;
}

void write_attr(hid_t obj, const char* name, hid_t type, hid_t space, const void* value) {
  if (H5Aexists(obj, name) > 0) H5Adelete(obj, name);
  hid_t a = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  Id owner(a);
  // A null dataspace (empty shape) has no data to write.
  if (a < 0 || (H5Sget_simple_extent_type(space) != H5S_NULL && H5Awrite(a, type, value) < 0))
    throw Error(explain(std::string("cannot write HDF5 attribute ") + name, "HDF5 call failed",
                        "check free space and I/O errors on the checkpoint filesystem"));
}

Id open_attr(hid_t obj, const char* name, const std::string& where) {
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  if (a < 0) fail(where, std::string("attribute ") + name + " is missing");
  return Id(a);
}

}  // namespace

void set_attr(hid_t obj, const char* name, const std::string& value) {
  // Fixed-length: a variable-length string lives in the global heap, which HDF5 never
  // checksums (Saker itself reads the manifest, not these attributes).
  Id t(H5Tcopy(H5T_C_S1));
  H5Tset_size(t.get(), std::max<std::size_t>(value.size(), 1));
  H5Tset_strpad(t.get(), H5T_STR_NULLPAD);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  Id s(H5Screate(H5S_SCALAR));
  std::string padded = value.empty() ? std::string(1, '\0') : value;
  write_attr(obj, name, t.get(), s.get(), padded.data());
}

void set_attr(hid_t obj, const char* name, std::uint64_t value) {
  Id s(H5Screate(H5S_SCALAR));
  write_attr(obj, name, H5T_STD_U64LE, s.get(), &value);
}

void set_attr(hid_t obj, const char* name, std::int64_t value) {
  Id s(H5Screate(H5S_SCALAR));
  write_attr(obj, name, H5T_STD_I64LE, s.get(), &value);
}

void set_attr(hid_t obj, const char* name, const std::vector<std::uint64_t>& value) {
  // An empty array (scalar tensor shape) is stored as a null dataspace.
  hsize_t n = value.size();
  Id s(value.empty() ? H5Screate(H5S_NULL) : H5Screate_simple(1, &n, nullptr));
  write_attr(obj, name, H5T_STD_U64LE, s.get(), value.data());
}

bool has_attr(hid_t obj, const char* name) { return H5Aexists(obj, name) > 0; }

std::string attr_string(hid_t obj, const char* name, const std::string& where) {
  Id a = open_attr(obj, name, where);
  Id ft(H5Aget_type(a.get()));
  if (H5Tget_class(ft.get()) != H5T_STRING) fail(where, std::string("attribute ") + name + " is not a string");
  if (H5Tis_variable_str(ft.get()) > 0) {
    Id t = string_type();
    char* p = nullptr;
    check(H5Aread(a.get(), t.get(), &p), where + ": read attribute " + name);
    std::string out = p ? p : "";
    H5free_memory(p);
    return out;
  }
  std::string out(H5Tget_size(ft.get()), '\0');
  Id t(H5Tcopy(ft.get()));
  check(H5Aread(a.get(), t.get(), out.data()), where + ": read attribute " + name);
  out.resize(out.find('\0') == std::string::npos ? out.size() : out.find('\0'));
  return out;
}

std::uint64_t attr_u64(hid_t obj, const char* name, const std::string& where) {
  Id a = open_attr(obj, name, where);
  std::uint64_t v = 0;
  check(H5Aread(a.get(), H5T_NATIVE_UINT64, &v), where + ": read attribute " + name);
  return v;
}

std::int64_t attr_i64(hid_t obj, const char* name, const std::string& where) {
  Id a = open_attr(obj, name, where);
  std::int64_t v = 0;
  check(H5Aread(a.get(), H5T_NATIVE_INT64, &v), where + ": read attribute " + name);
  return v;
}

std::vector<std::uint64_t> attr_u64s(hid_t obj, const char* name, const std::string& where) {
  Id a = open_attr(obj, name, where);
  Id s(H5Aget_space(a.get()));
  hssize_t n = H5Sget_simple_extent_npoints(s.get());
  if (n < 0 || n > (1 << 20)) fail(where, std::string("attribute ") + name + " has a bad size");
  std::vector<std::uint64_t> v(static_cast<std::size_t>(n));
  if (n > 0) check(H5Aread(a.get(), H5T_NATIVE_UINT64, v.data()), where + ": read attribute " + name);
  return v;
}

// ---------------------------------------------------------------- types

Id type_for(std::uint8_t dtype) {
  switch (static_cast<DType>(dtype)) {
    case DType::f16: {
      // HDF5 1.10 has no predefined half type; h5py maps this layout to numpy float16.
      Id t(H5Tcopy(H5T_IEEE_F32LE));
      check(H5Tset_fields(t.get(), 15, 10, 5, 0, 10), "float16 type");
      check(H5Tset_size(t.get(), 2), "float16 type");
      check(H5Tset_ebias(t.get(), 15), "float16 type");
      return t;
    }
    case DType::f32: return Id(H5Tcopy(H5T_IEEE_F32LE));
    case DType::f64: return Id(H5Tcopy(H5T_IEEE_F64LE));
    case DType::i8: return Id(H5Tcopy(H5T_STD_I8LE));
    case DType::i16: return Id(H5Tcopy(H5T_STD_I16LE));
    case DType::i32: return Id(H5Tcopy(H5T_STD_I32LE));
    case DType::i64: return Id(H5Tcopy(H5T_STD_I64LE));
    case DType::bf16:
    case DType::u16: return Id(H5Tcopy(H5T_STD_U16LE));
    case DType::u32: return Id(H5Tcopy(H5T_STD_U32LE));
    case DType::u64: return Id(H5Tcopy(H5T_STD_U64LE));
    case DType::boolean:
    case DType::u8: return Id(H5Tcopy(H5T_STD_U8LE));
  }
  SAKER_ASSERT(false, "unknown dtype");
}

Id raw_bytes_type() { return Id(H5Tcopy(H5T_STD_U8LE)); }

}  // namespace saker::ckpt::h5
