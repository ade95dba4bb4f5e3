#include "framework/checkpoint/h5_file.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <type_traits>
#include <utility>

#include "framework/checkpoint/h5_file_internal.h"

namespace keel {

using h5_internal::absolute_path;
using h5_internal::H5FileImpl;
using h5_internal::Hdf5Lock;
using h5_internal::hdf5_detail;
using h5_internal::Id;
using h5_internal::type_name;
using h5_internal::fixed_string_type;

static_assert(std::is_same_v<hid_t, int64_t>, "H5File stores hid_t as int64_t");

H5File H5File::create(const std::string& path) {
  Hdf5Lock lock;
  H5FileImpl impl{path, H5I_INVALID_HID};
  Id fapl = impl.check_id(H5Pcreate(H5P_FILE_ACCESS), "cannot create a property list");
  // The 1.8 object format stores large attributes (long layer_names lists) densely instead of
  // failing at HDF5's 64 KiB object-header limit; HDF5 >= 1.8 (every h5py) reads it.
  impl.check(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18),
             "cannot set a property list");
  // No timestamps (here for the root group): the same content gives the same bytes.
  Id fcpl = h5_internal::untimed_creation_plist(H5P_FILE_CREATE);
  if (fcpl.get() < 0) throw CheckpointError("cannot create checkpoint " + path + hdf5_detail());
  hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get());
  if (id < 0) throw CheckpointError("cannot create checkpoint " + path + hdf5_detail());
  return H5File(path, id);
}

H5File H5File::open_read(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw CheckpointError("cannot open checkpoint " + path + ": no such file");
  Hdf5Lock lock;
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id < 0)
    throw CheckpointError("cannot open checkpoint " + path +
                          ": not a readable HDF5 file (truncated or not a checkpoint?)");
  return H5File(path, id);
}

H5File::H5File(H5File&& other) noexcept
    : path_(std::move(other.path_)),
      id_(std::exchange(other.id_, H5I_INVALID_HID)),
      strict_(other.strict_) {}

H5File& H5File::operator=(H5File&& other) noexcept {
  if (this != &other) {
    if (id_ >= 0) {
      Hdf5Lock lock;
      H5Fclose(id_);
    }
    path_ = std::move(other.path_);
    id_ = std::exchange(other.id_, H5I_INVALID_HID);
    strict_ = other.strict_;
  }
  return *this;
}

H5File::~H5File() {
  if (id_ < 0) return;
  Hdf5Lock lock;
  H5Fclose(id_);
}

void H5File::close() {
  if (id_ < 0) return;
  Hdf5Lock lock;
  hid_t id = std::exchange(id_, H5I_INVALID_HID);
  if (H5Fclose(id) < 0)
    throw CheckpointError("checkpoint " + path_ + ": cannot close (flush failed)" + hdf5_detail());
}

int64_t H5File::checked_id() const {
  if (id_ < 0) throw CheckpointError("checkpoint " + path_ + ": the file is closed");
  return id_;
}

void H5File::create_group(const std::string& path) {
  Hdf5Lock lock;
  H5FileImpl impl{path_, checked_id(), strict_};
  const std::string abs = absolute_path(path);
  if (impl.exists(abs)) {
    if (impl.object_kind(abs) != H5I_GROUP) impl.fail("cannot create group " + abs +
                                                      ": a dataset of that name exists");
    return;
  }
  impl.check_creatable(abs);
  impl.create_groups(abs);
}

bool H5File::exists(const std::string& path) {
  Hdf5Lock lock;
  return H5FileImpl{path_, checked_id()}.exists(path);
}

std::vector<std::string> H5File::children(const std::string& group_path) {
  Hdf5Lock lock;
  H5FileImpl impl{path_, checked_id(), strict_};
  const std::string abs = absolute_path(group_path);
  Id group = impl.open_object(abs);
  if (H5Iget_type(group.get()) != H5I_GROUP) impl.fail(abs + " is a dataset, not a group");
  std::vector<std::string> names;
  auto collect = [](hid_t, const char* name, const H5L_info_t*, void* client) -> herr_t {
    try {
      static_cast<std::vector<std::string>*>(client)->emplace_back(name);
      return 0;
    } catch (...) {
      return -1;  // an exception must not cross HDF5's C frames
    }
  };
  impl.check(H5Literate(group.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr, collect, &names),
             "cannot list group " + abs);
  std::sort(names.begin(), names.end());
  return names;
}

void H5File::write_floats(const std::string& path, const Shape& shape, const float* data) {
  Hdf5Lock lock;
  H5FileImpl impl{path_, checked_id(), strict_};
  impl.create_dataset(path, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, shape, data);
  impl.write_checksum(absolute_path(path), data, static_cast<size_t>(num_elements(shape)) * sizeof(float));
}

Shape H5File::dataset_shape(const std::string& path) {
  Hdf5Lock lock;
  H5FileImpl impl{path_, checked_id(), strict_};
  const std::string abs = absolute_path(path);
  Id dataset = impl.open_dataset(abs);
  Id space = impl.check_id(H5Dget_space(dataset.get()), "cannot inspect dataset " + abs);
  return impl.shape_of(space.get(), "dataset " + abs);
}

void H5File::read_floats(const std::string& path, const Shape& expected_shape, float* out) {
  Hdf5Lock lock;
  H5FileImpl impl{path_, checked_id(), strict_};
  const std::string abs = absolute_path(path);
  const std::string what = "dataset " + abs;
  Id dataset = impl.open_dataset(abs);
  Id type = impl.check_id(H5Dget_type(dataset.get()), "cannot inspect " + what);
  if (H5Tget_class(type.get()) != H5T_FLOAT || H5Tget_size(type.get()) != 4)
    impl.fail(what + " is " + type_name(type.get()) + ", expected float32");
  Id space = impl.check_id(H5Dget_space(dataset.get()), "cannot inspect " + what);
  Shape shape = impl.shape_of(space.get(), what);
  if (shape != expected_shape)
    impl.fail(what + " has shape " + shape_string(shape) + ", the model expects " +
              shape_string(expected_shape));
  const size_t count = static_cast<size_t>(num_elements(shape));
  if (count > 0) {
    if (out == nullptr) impl.fail("cannot read " + what + ": no output buffer given");
    impl.check(H5Dread(dataset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out),
               "cannot read " + what);
  }
  impl.verify_checksum(dataset.get(), what, out, count * sizeof(float));
}

void H5File::write_int64(const std::string& path, int64_t value) {
  Hdf5Lock lock;
  H5FileImpl impl{path_, checked_id(), strict_};
  impl.create_dataset(path, H5T_STD_I64LE, H5T_NATIVE_INT64, {}, &value);
  impl.write_checksum(absolute_path(path), &value, sizeof value);
}

int64_t H5File::read_int64(const std::string& path) {
  Hdf5Lock lock;
  H5FileImpl impl{path_, checked_id(), strict_};
  const std::string abs = absolute_path(path);
  const std::string what = "dataset " + abs;
  Id dataset = impl.open_dataset(abs);
  Id type = impl.check_id(H5Dget_type(dataset.get()), "cannot inspect " + what);
  Id space = impl.check_id(H5Dget_space(dataset.get()), "cannot inspect " + what);
  hid_t ds = dataset.get();
  const int64_t value = impl.read_one_int64(type.get(), space.get(), what, [ds](hid_t mem, void* buf) {
    return H5Dread(ds, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
  });
  impl.verify_checksum(ds, what, &value, sizeof value);
  return value;
}

void H5File::write_string(const std::string& path, const std::string& value) {
  Hdf5Lock lock;
  H5FileImpl impl{path_, checked_id(), strict_};
  if (value.find('\0') != std::string::npos)
    impl.fail("cannot write dataset " + absolute_path(path) + ": the string contains a NUL byte");
  Id type = fixed_string_type(value.size(), H5T_CSET_UTF8);
  if (type.get() < 0) impl.fail("cannot create a string type" + hdf5_detail());
  impl.create_dataset(path, type.get(), type.get(), {}, value.empty() ? "" : value.data());
  impl.write_checksum(absolute_path(path), value.data(), value.size());
}

std::string H5File::read_string(const std::string& path) {
  Hdf5Lock lock;
  H5FileImpl impl{path_, checked_id(), strict_};
  const std::string abs = absolute_path(path);
  const std::string what = "dataset " + abs;
  Id dataset = impl.open_dataset(abs);
  Id type = impl.check_id(H5Dget_type(dataset.get()), "cannot inspect " + what);
  Id space = impl.check_id(H5Dget_space(dataset.get()), "cannot inspect " + what);
  hid_t ds = dataset.get();
  std::vector<std::string> values =
      impl.read_strings(type.get(), space.get(), what, /*max_count=*/1, [ds](hid_t mem, void* buf) {
        return H5Dread(ds, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
      });
  if (values.size() != 1)
    impl.fail(what + " holds " + std::to_string(values.size()) + " strings, expected 1");
  impl.verify_checksum(ds, what, values[0].data(), values[0].size());
  return values[0];
}

void H5File::set_attr_string(const std::string& object, const std::string& name,
                             const std::string& value) {
  Hdf5Lock lock;
  H5FileImpl impl{path_, checked_id(), strict_};
  if (value.find('\0') != std::string::npos)
    impl.fail("cannot write attribute " + name + " of " + absolute_path(object) +
              ": the string contains a NUL byte");
  Id type = fixed_string_type(value.size(), H5T_CSET_UTF8);
  if (type.get() < 0) impl.fail("cannot create a string type" + hdf5_detail());
  Id space = impl.check_id(H5Screate(H5S_SCALAR), "cannot create a dataspace");
  impl.write_attr(object, name, type.get(), type.get(), space.get(), value.empty() ? "" : value.data(), true);
}

void H5File::set_attr_string_list(const std::string& object, const std::string& name,
                                  const std::vector<std::string>& values) {
  Hdf5Lock lock;
  H5FileImpl impl{path_, checked_id(), strict_};
  size_t width = 1;  // HDF5 has no 0-byte strings; h5py also uses 1 for an empty 'S' array
  for (const std::string& value : values) {
    if (value.find('\0') != std::string::npos)
      impl.fail("cannot write attribute " + name + " of " + absolute_path(object) +
                ": an entry contains a NUL byte");
    width = std::max(width, value.size());
  }
  Id type = impl.check_id(H5Tcopy(H5T_C_S1), "cannot create a string type");
  impl.check(H5Tset_size(type.get(), width), "cannot create a string type");
  impl.check(H5Tset_strpad(type.get(), H5T_STR_NULLPAD), "cannot create a string type");
  impl.check(H5Tset_cset(type.get(), H5T_CSET_ASCII), "cannot create a string type");
  hsize_t dims[1] = {values.size()};
  Id space = impl.check_id(H5Screate_simple(1, dims, nullptr), "cannot create a dataspace");
  std::vector<char> buffer(values.size() * width, '\0');
  for (size_t i = 0; i < values.size(); ++i)
    std::memcpy(buffer.data() + i * width, values[i].data(), values[i].size());
  impl.write_attr(object, name, type.get(), type.get(), space.get(), buffer.data(),
                  !values.empty());
}

void H5File::set_attr_int64(const std::string& object, const std::string& name, int64_t value) {
  Hdf5Lock lock;
  H5FileImpl impl{path_, checked_id(), strict_};
  Id space = impl.check_id(H5Screate(H5S_SCALAR), "cannot create a dataspace");
  impl.write_attr(object, name, H5T_STD_I64LE, H5T_NATIVE_INT64, space.get(), &value, true);
}

bool H5File::has_attr(const std::string& object, const std::string& name) {
  Hdf5Lock lock;
  H5FileImpl impl{path_, checked_id(), strict_};
  const std::string abs = absolute_path(object);
  Id obj = impl.open_object(abs);
  return impl.check(H5Aexists(obj.get(), name.c_str()),
                    "cannot look up attribute " + name + " of " + abs) > 0;
}

std::string H5File::get_attr_string(const std::string& object, const std::string& name) {
  Hdf5Lock lock;
  H5FileImpl impl{path_, checked_id(), strict_};
  std::vector<std::string> values = impl.read_attr_strings(object, name, false);
  if (values.size() != 1)
    impl.fail("attribute " + name + " of " + absolute_path(object) + " holds " +
              std::to_string(values.size()) + " strings, expected 1");
  return values[0];
}

std::vector<std::string> H5File::get_attr_string_list(const std::string& object,
                                                      const std::string& name) {
  Hdf5Lock lock;
  return H5FileImpl{path_, checked_id()}.read_attr_strings(object, name, true);
}

int64_t H5File::get_attr_int64(const std::string& object, const std::string& name) {
  Hdf5Lock lock;
  H5FileImpl impl{path_, checked_id(), strict_};
  const std::string abs = absolute_path(object);
  const std::string what = "attribute " + name + " of " + abs;
  Id attr = impl.open_attr(abs, name);
  Id type = impl.check_id(H5Aget_type(attr.get()), "cannot inspect " + what);
  Id space = impl.check_id(H5Aget_space(attr.get()), "cannot inspect " + what);
  hid_t attr_id = attr.get();
  return impl.read_one_int64(type.get(), space.get(), what,
                             [attr_id](hid_t mem, void* buf) { return H5Aread(attr_id, mem, buf); });
}

}  // namespace keel
