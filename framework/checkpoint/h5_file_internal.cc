#include "framework/checkpoint/h5_file_internal.h"

namespace keel::h5_internal {

std::recursive_mutex& hdf5_mutex() {
  static std::recursive_mutex mutex;
  return mutex;
}

std::string hdf5_detail() {
  std::string detail;
  auto walk = [](unsigned n, const H5E_error2_t* err, void* client) -> herr_t {
    if (n == 0 && err->desc) *static_cast<std::string*>(client) = err->desc;
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk, &detail);
  return detail.empty() ? std::string() : " (HDF5: " + detail + ")";
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (begin <= path.size()) {
    size_t end = path.find('/', begin);
    if (end == std::string::npos) end = path.size();
    if (end > begin) parts.push_back(path.substr(begin, end - begin));
    begin = end + 1;
  }
  return parts;
}

std::string absolute_path(const std::string& path) {
  std::string abs;
  for (const std::string& part : split_path(path)) abs += "/" + part;
  return abs.empty() ? "/" : abs;
}

bool space_shape(hid_t space, Shape* shape) {
  H5S_class_t cls = H5Sget_simple_extent_type(space);
  if (cls == H5S_SCALAR) {
    shape->clear();
    return true;
  }
  if (cls != H5S_SIMPLE) return false;
  int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 0) return false;
  std::vector<hsize_t> dims(rank);
  if (H5Sget_simple_extent_dims(space, dims.data(), nullptr) < 0) return false;
  shape->assign(dims.begin(), dims.end());
  return true;
}

std::string type_name(hid_t type) {
  size_t bytes = H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_FLOAT: return "float" + std::to_string(bytes * 8);
    case H5T_INTEGER:
      return (H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(bytes * 8);
    case H5T_STRING: return "a string";
    case H5T_COMPOUND: return "compound";
    case H5T_ENUM: return "enum";
    case H5T_ARRAY: return "array";
    case H5T_VLEN: return "vlen";
    case H5T_REFERENCE: return "reference";
    case H5T_OPAQUE: return "opaque";
    case H5T_BITFIELD: return "bitfield";
    default: return "unknown type";
  }
}

Id variable_string_type(H5T_cset_t cset) {
  Id type(H5Tcopy(H5T_C_S1));
  if (type.get() < 0 || H5Tset_size(type.get(), H5T_VARIABLE) < 0 ||
      H5Tset_cset(type.get(), cset) < 0 || H5Tset_strpad(type.get(), H5T_STR_NULLTERM) < 0)
    return Id();
  return type;
}

Id fixed_string_type(size_t width, H5T_cset_t cset) {
  Id type(H5Tcopy(H5T_C_S1));
  if (type.get() < 0 || H5Tset_size(type.get(), width == 0 ? 1 : width) < 0 || H5Tset_cset(type.get(), cset) < 0 ||
      H5Tset_strpad(type.get(), H5T_STR_NULLPAD) < 0)
    return Id();
  return type;
}

void H5FileImpl::fail(const std::string& what) const {
  throw CheckpointError("checkpoint " + file + ": " + what);
}

Id H5FileImpl::check_id(hid_t result, const std::string& what) const { return Id(check(result, what)); }

H5I_type_t H5FileImpl::object_kind(const std::string& abs) const {
  Id obj = check_id(H5Oopen(id, abs.c_str(), H5P_DEFAULT), "cannot open object " + abs);
  return check(H5Iget_type(obj.get()), "cannot inspect object " + abs);
}

bool H5FileImpl::exists(const std::string& path) const {
  std::vector<std::string> parts = split_path(path);
  std::string prefix;
  for (size_t i = 0; i < parts.size(); ++i) {
    prefix += "/" + parts[i];
    // H5Lexists on "a/b" fails unless "a" exists and is a group, so walk down one level at a
    // time and stop at the first missing link or non-group.
    if (check(H5Lexists(id, prefix.c_str(), H5P_DEFAULT), "cannot look up " + prefix) == 0)
      return false;
    if (check(H5Oexists_by_name(id, prefix.c_str(), H5P_DEFAULT), "cannot look up " + prefix) ==
        0)
      return false;
    if (i + 1 < parts.size() && object_kind(prefix) != H5I_GROUP) return false;
  }
  return true;
}

void H5FileImpl::check_creatable(const std::string& abs) const {
  std::vector<std::string> parts = split_path(abs);
  if (parts.empty()) fail("cannot create \"/\": the root group always exists");
  std::string prefix;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    prefix += "/" + parts[i];
    if (!exists(prefix)) return;
    if (object_kind(prefix) != H5I_GROUP)
      fail("cannot create " + abs + ": " + prefix + " is a dataset, not a group");
  }
  if (exists(abs)) fail("cannot create " + abs + ": it already exists");
}

Id untimed_creation_plist(hid_t cls) {
  Id plist(H5Pcreate(cls));
  if (plist.get() < 0 || H5Pset_obj_track_times(plist.get(), false) < 0) return Id();
  return plist;
}

void H5FileImpl::create_groups(const std::string& abs) const {
  Id gcpl = untimed_creation_plist(H5P_GROUP_CREATE);
  if (gcpl.get() < 0) fail("cannot create a property list" + hdf5_detail());
  std::string prefix;
  for (const std::string& part : split_path(abs)) {
    prefix += "/" + part;
    if (exists(prefix)) continue;
    check_id(H5Gcreate2(id, prefix.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), "cannot create group " + prefix);
  }
}

void H5FileImpl::create_dataset(const std::string& path, hid_t file_type, hid_t mem_type, const Shape& shape,
                                const void* data) const {
  const std::string abs = absolute_path(path);
  check_creatable(abs);
  if (shape.size() > H5S_MAX_RANK) fail("cannot create dataset " + abs + ": rank too large");
  for (int64_t d : shape)
    if (d < 0) fail("cannot create dataset " + abs + " of shape " + shape_string(shape));
  if (data == nullptr && num_elements(shape) > 0)
    fail("cannot write dataset " + abs + ": no data given");
  Id space;
  if (shape.empty()) {
    space = check_id(H5Screate(H5S_SCALAR), "cannot create a dataspace");
  } else {
    std::vector<hsize_t> dims(shape.begin(), shape.end());
    space = check_id(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                     "cannot create a dataspace");
  }
  create_groups(abs.substr(0, abs.rfind('/')));
  Id dcpl = untimed_creation_plist(H5P_DATASET_CREATE);
  if (dcpl.get() < 0) fail("cannot create a property list" + hdf5_detail());
  Id dataset = check_id(
      H5Dcreate2(id, abs.c_str(), file_type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
      "cannot create dataset " + abs);
  if (num_elements(shape) > 0)
    check(H5Dwrite(dataset.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data),
          "cannot write dataset " + abs);
}

Id H5FileImpl::open_dataset(const std::string& abs) const {
  if (!exists(abs)) fail("dataset " + abs + " does not exist");
  if (object_kind(abs) != H5I_DATASET) fail(abs + " is a group, not a dataset");
  return check_id(H5Dopen2(id, abs.c_str(), H5P_DEFAULT), "cannot open dataset " + abs);
}

Shape H5FileImpl::shape_of(hid_t space, const std::string& what) const {
  Shape shape;
  if (!space_shape(space, &shape)) fail(what + " has no data (null or invalid dataspace)");
  return shape;
}

Id H5FileImpl::open_object(const std::string& abs) const {
  if (!exists(abs)) fail("object " + abs + " does not exist");
  return check_id(H5Oopen(id, abs.c_str(), H5P_DEFAULT), "cannot open object " + abs);
}

void H5FileImpl::write_attr(const std::string& object, const std::string& name, hid_t file_type,
                            hid_t mem_type, hid_t space, const void* data, bool has_data) const {
  const std::string abs = absolute_path(object);
  const std::string what = "attribute " + name + " of " + abs;
  Id obj = open_object(abs);
  if (check(H5Aexists(obj.get(), name.c_str()), "cannot look up " + what) > 0)
    check(H5Adelete(obj.get(), name.c_str()), "cannot replace " + what);
  Id attr = check_id(
      H5Acreate2(obj.get(), name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT),
      "cannot create " + what);
  if (has_data) check(H5Awrite(attr.get(), mem_type, data), "cannot write " + what);
}

Id H5FileImpl::open_attr(const std::string& abs, const std::string& name) const {
  Id obj = open_object(abs);
  const std::string what = "attribute " + name + " of " + abs;
  if (check(H5Aexists(obj.get(), name.c_str()), "cannot look up " + what) == 0)
    fail("object " + abs + " has no attribute " + name);
  return check_id(H5Aopen(obj.get(), name.c_str(), H5P_DEFAULT), "cannot open " + what);
}

std::vector<std::string> H5FileImpl::read_attr_strings(const std::string& object, const std::string& name,
                                                       bool allow_any_empty) const {
  const std::string abs = absolute_path(object);
  const std::string what = "attribute " + name + " of " + abs;
  Id attr = open_attr(abs, name);
  Id type = check_id(H5Aget_type(attr.get()), "cannot inspect " + what);
  Id space = check_id(H5Aget_space(attr.get()), "cannot inspect " + what);
  int rank = check(H5Sget_simple_extent_ndims(space.get()), "cannot inspect " + what);
  if (rank > 1) fail(what + " has " + std::to_string(rank) + " dimensions, expected 1");
  hssize_t count = check(H5Sget_simple_extent_npoints(space.get()), "cannot inspect " + what);
  // numpy turns an empty Python list into a float64 array; Keras writes that for layers
  // without weights. An empty array of any type is an empty list.
  if (count == 0 && allow_any_empty) return {};
  hid_t attr_id = attr.get();
  return read_strings(type.get(), space.get(), what, kMaxStringCount,
                      [attr_id](hid_t mem, void* buf) { return H5Aread(attr_id, mem, buf); });
}

}  // namespace keel::h5_internal
