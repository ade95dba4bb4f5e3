// Per-dataset checksums (h5_file.h, "Checksums"): written beside every dataset H5File writes and
// checked against the very bytes a read returns, so that no damaged value is ever used.
#include <zlib.h>

#include <bit>
#include <cstdio>
#include <limits>

#include "framework/checkpoint/h5_file.h"
#include "framework/checkpoint/h5_file_internal.h"

namespace keel {

static_assert(std::endian::native == std::endian::little,
              "checksums are taken over the little-endian bytes keel stores; a big-endian host would "
              "have to swap them first");

namespace h5_internal {

uint32_t crc32_of(const void* bytes, size_t size) {
  uLong crc = crc32_z(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(bytes);
  return static_cast<uint32_t>(crc32_z(crc, p, size));
}

namespace {

std::string hex32(uint32_t value) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "0x%08x", value);
  return buffer;
}

}  // namespace

void H5FileImpl::write_checksum(const std::string& abs, const void* bytes, size_t size) const {
  const uint32_t crc = crc32_of(bytes, size);
  Id space = check_id(H5Screate(H5S_SCALAR), "cannot create a dataspace");
  write_attr(abs, kChecksumAttr, H5T_STD_U32LE, H5T_NATIVE_UINT32, space.get(), &crc, true);
}

void H5FileImpl::verify_checksum(hid_t dataset, const std::string& what, const void* bytes, size_t size) const {
  const htri_t has = check(H5Aexists(dataset, kChecksumAttr), "cannot look up the checksum of " + what);
  if (has == 0) {
    if (strict) fail(what + " has no checksum (" + kChecksumAttr + "): the file is damaged or was edited");
    return;
  }
  Id attr = check_id(H5Aopen(dataset, kChecksumAttr, H5P_DEFAULT), "cannot open the checksum of " + what);
  Id type = check_id(H5Aget_type(attr.get()), "cannot inspect the checksum of " + what);
  Id space = check_id(H5Aget_space(attr.get()), "cannot inspect the checksum of " + what);
  const hid_t attr_id = attr.get();
  const int64_t stored = read_one_int64(type.get(), space.get(), "the checksum of " + what,
                                        [attr_id](hid_t mem, void* buf) { return H5Aread(attr_id, mem, buf); });
  const uint32_t computed = crc32_of(bytes, size);
  if (stored < 0 || stored > std::numeric_limits<uint32_t>::max() || static_cast<uint32_t>(stored) != computed) {
    fail(what + " fails its checksum (stored " + hex32(static_cast<uint32_t>(stored)) + ", computed " +
         hex32(computed) + "): the file is damaged");
  }
}

}  // namespace h5_internal

namespace {

using h5_internal::H5FileImpl;
using h5_internal::Id;

// Every dataset in the file, by absolute path, in HDF5's visiting order (by name).
std::vector<std::string> all_datasets(const H5FileImpl& impl) {
  std::vector<std::string> paths;
  auto visit = [](hid_t, const char* name, const H5O_info_t* info, void* client) -> herr_t {
    try {
      if (info->type == H5O_TYPE_DATASET) static_cast<std::vector<std::string>*>(client)->push_back(std::string("/") + name);
      return 0;
    } catch (...) {
      return -1;  // an exception must not cross HDF5's C frames
    }
  };
#if H5_VERSION_GE(1, 12, 0)
  impl.check(H5Ovisit3(impl.id, H5_INDEX_NAME, H5_ITER_INC, visit, &paths, H5O_INFO_BASIC), "cannot list the datasets");
#else
  impl.check(H5Ovisit2(impl.id, H5_INDEX_NAME, H5_ITER_INC, visit, &paths, H5O_INFO_BASIC), "cannot list the datasets");
#endif
  return paths;
}

// The element count of a float dataset to be read whole, refused above kMaxVerifiedElements (a
// damaged header can declare any shape, and the read buffer is sized from it).
size_t verifiable_count(const std::string& file, const std::string& path, const Shape& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n) || n > H5File::kMaxVerifiedElements) {
      throw CheckpointError("checkpoint " + file + ": dataset " + path + " declares shape " + shape_string(shape) +
                            ", more than the " + std::to_string(H5File::kMaxVerifiedElements) +
                            " values a checkpoint dataset may hold");
    }
  }
  return static_cast<size_t>(n);
}

}  // namespace

uint32_t H5File::crc32(const void* bytes, size_t size) { return h5_internal::crc32_of(bytes, size); }

int64_t H5File::verify_checksums() {
  std::vector<std::string> paths;
  {
    h5_internal::Hdf5Lock lock;
    paths = all_datasets(H5FileImpl{path_, checked_id(), strict_});
  }
  std::vector<float> buffer;
  for (const std::string& path : paths) {
    int class_id = 0;
    {
      h5_internal::Hdf5Lock lock;
      H5FileImpl impl{path_, checked_id(), strict_};
      Id dataset = impl.open_dataset(path);
      Id type = impl.check_id(H5Dget_type(dataset.get()), "cannot inspect dataset " + path);
      class_id = H5Tget_class(type.get());
    }
    if (class_id == H5T_FLOAT) {
      const Shape shape = dataset_shape(path);
      buffer.resize(verifiable_count(path_, path, shape));
      read_floats(path, shape, buffer.data());
    } else if (class_id == H5T_INTEGER) {
      read_int64(path);
    } else if (class_id == H5T_STRING) {
      read_string(path);
    } else if (strict_) {
      throw CheckpointError("checkpoint " + path_ + ": dataset " + path + " has a type keel never writes");
    }
  }
  return static_cast<int64_t>(paths.size());
}

}  // namespace keel
