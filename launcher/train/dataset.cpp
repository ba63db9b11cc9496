#include "launcher/train/dataset.hpp"

#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <cstdio>
#include <filesystem>

#include "common/error.hpp"
#include "launcher/train/rng.hpp"

namespace saker::train {
namespace {

// Closes an HDF5 handle on scope exit.
struct H5 {
  hid_t id;
  herr_t (*close)(hid_t);
  ~H5() { if (id >= 0) close(id); }
};

// HDF5 prints its own error stack to stderr by default; our messages say it better.
void quiet_hdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

Error h5_error(const std::string& path, const std::string& what, const std::string& fix) {
  return Error(explain("HDF5 file " + path + ": " + what, "the HDF5 library reported an error", fix));
}

InputUnusable unusable(const std::string& path, const std::string& why, const std::string& fix) {
  return InputUnusable(explain("cannot use the data file " + path, why, fix));
}

// Why `path` cannot be the data file, in words, before HDF5 is asked (its own error says
// only "reported an error"): missing, a directory, not readable, not HDF5.
void check_data_file(const std::string& path) {
  const std::string make = "create it with `saker-train make-data --out " + path + "`, or pass the right --data";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) throw unusable(path, "it does not exist", make);
    if (err == EACCES) throw unusable(path, "it is not readable: " + std::string(std::strerror(err)),
                                      "check the permissions of the file and its directories");
    throw unusable(path, std::strerror(err), "check the path");
  }
  if (S_ISDIR(st.st_mode)) throw unusable(path, "it is a directory, not a file", "pass the HDF5 file inside it as --data");
  if (::access(path.c_str(), R_OK) != 0) {
    throw unusable(path, "it is not readable: " + std::string(std::strerror(errno)),
                   "check the permissions of the file and its directories (chmod u+r)");
  }
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    throw unusable(path, "it is not an HDF5 file", "pass an HDF5 file with datasets X and y (saker-train make-data "
                                                   "writes one)");
  }
}

}  // namespace

Dataset make_synthetic(const SyntheticSpec& spec, const std::function<void(int, int)>& on_rows) {
  if (spec.rows < 1 || spec.features < 1 || spec.classes < 2) {
    throw Error(explain("synthetic dataset " + std::to_string(spec.rows) + "x" + std::to_string(spec.features) +
                            " with " + std::to_string(spec.classes) + " classes",
                        "it needs at least 1 row, 1 feature and 2 classes", "pass --samples, --features, --classes"));
  }
  Rng rng = Rng::derived(spec.seed, 0x5eedda7a);
  std::vector<float> centres(static_cast<std::size_t>(spec.classes) * spec.features);
  for (float& c : centres) c = static_cast<float>(rng.normal() * 2.0);
  Dataset d{spec.rows, spec.features, spec.classes, {}, {}};
  d.x.resize(static_cast<std::size_t>(spec.rows) * spec.features);
  d.y.resize(spec.rows);
  for (int r = 0; r < spec.rows; ++r) {
    const int label = static_cast<int>(rng.below(spec.classes));
    d.y[r] = label;
    for (int f = 0; f < spec.features; ++f) {
      d.x[static_cast<std::size_t>(r) * spec.features + f] =
          centres[static_cast<std::size_t>(label) * spec.features + f] + static_cast<float>(rng.normal() * spec.spread);
    }
    if (on_rows && ((r + 1) % 4096 == 0 || r + 1 == spec.rows)) on_rows(r + 1, spec.rows);
  }
  return d;
}

void write_dataset(const Dataset& d, const std::string& path) {
  quiet_hdf5();
  const std::string tmp = path + ".tmp";
  {
    H5 file{H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose};
    if (file.id < 0) throw h5_error(tmp, "cannot create", "check that the directory exists and is writable");
    const hsize_t xdims[2] = {static_cast<hsize_t>(d.rows), static_cast<hsize_t>(d.features)};
    const hsize_t ydims[1] = {static_cast<hsize_t>(d.rows)};
    H5 xspace{H5Screate_simple(2, xdims, nullptr), H5Sclose};
    H5 yspace{H5Screate_simple(1, ydims, nullptr), H5Sclose};
    H5 xset{H5Dcreate2(file.id, "X", H5T_IEEE_F32LE, xspace.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose};
    H5 yset{H5Dcreate2(file.id, "y", H5T_STD_I32LE, yspace.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose};
    if (xset.id < 0 || yset.id < 0 ||
        H5Dwrite(xset.id, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, d.x.data()) < 0 ||
        H5Dwrite(yset.id, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, d.y.data()) < 0) {
      throw h5_error(tmp, "cannot write X/y", "check free space");
    }
    H5 scalar{H5Screate(H5S_SCALAR), H5Sclose};
    H5 attr{H5Acreate2(file.id, "classes", H5T_STD_I32LE, scalar.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
    const std::int32_t classes = d.classes;
    if (attr.id < 0 || H5Awrite(attr.id, H5T_NATIVE_INT32, &classes) < 0) {
      throw h5_error(tmp, "cannot write the 'classes' attribute", "check free space");
    }
  }
  std::filesystem::rename(tmp, path);
}

Dataset read_dataset(const std::string& path) {
  quiet_hdf5();
  check_data_file(path);
  H5 file{H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose};
  if (file.id < 0) throw h5_error(path, "cannot open", "create it with `saker-train make-data --out " + path + "`");
  Dataset d;
  H5 xset{H5Dopen2(file.id, "X", H5P_DEFAULT), H5Dclose};
  H5 yset{H5Dopen2(file.id, "y", H5P_DEFAULT), H5Dclose};
  if (xset.id < 0 || yset.id < 0) {
    throw unusable(path, "it has no datasets X and y", "write X (rows x features) and y (rows), e.g. with saker-train make-data");
  }
  H5 xspace{H5Dget_space(xset.id), H5Sclose};
  H5 yspace{H5Dget_space(yset.id), H5Sclose};
  hsize_t xdims[2] = {0, 0}, ydims[1] = {0};
  if (H5Sget_simple_extent_ndims(xspace.id) != 2 || H5Sget_simple_extent_ndims(yspace.id) != 1) {
    throw Error(explain("HDF5 file " + path, "X must be 2-D (rows x features) and y 1-D", "rewrite the file"));
  }
  H5Sget_simple_extent_dims(xspace.id, xdims, nullptr);
  H5Sget_simple_extent_dims(yspace.id, ydims, nullptr);
  if (xdims[0] != ydims[0] || xdims[0] == 0 || xdims[0] > (1u << 30) || xdims[1] > (1u << 20)) {
    throw Error(explain("HDF5 file " + path + ": X has " + std::to_string(xdims[0]) + " rows, y " +
                            std::to_string(ydims[0]),
                        "they must be equal and non-zero", "rewrite the file"));
  }
  d.rows = static_cast<int>(xdims[0]);
  d.features = static_cast<int>(xdims[1]);
  d.x.resize(static_cast<std::size_t>(d.rows) * d.features);
  d.y.resize(d.rows);
  if (H5Dread(xset.id, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, d.x.data()) < 0 ||
      H5Dread(yset.id, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, d.y.data()) < 0) {
    throw h5_error(path, "cannot read X/y as float32/int32", "store X as floats and y as integers");
  }
  std::int32_t max_label = 0;
  for (std::int32_t label : d.y) {
    if (label < 0) throw Error(explain("HDF5 file " + path + ": negative label in y", "labels are class indices", "rewrite y"));
    max_label = std::max(max_label, label);
  }
  d.classes = max_label + 1;
  if (H5Aexists(file.id, "classes") > 0) {
    H5 attr{H5Aopen(file.id, "classes", H5P_DEFAULT), H5Aclose};
    std::int32_t classes = 0;
    if (attr.id >= 0 && H5Aread(attr.id, H5T_NATIVE_INT32, &classes) >= 0) {
      if (classes <= max_label) {
        throw Error(explain("HDF5 file " + path + ": label " + std::to_string(max_label) + " with classes=" +
                                std::to_string(classes),
                            "labels must be below the class count", "fix the 'classes' attribute or y"));
      }
      d.classes = classes;
    }
  }
  if (d.classes < 2) d.classes = 2;
  return d;
}

}  // namespace saker::train
