// INTERNAL to framework/checkpoint/h5_file*.cc: the HDF5 plumbing behind H5File — the process-wide
// lock, ownership of HDF5 ids, error checks, path lookups and string reads. It includes <hdf5.h>,
// which h5_file.h keeps away from H5File's users; include it only where H5File is implemented.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "framework/checkpoint/checkpoint_error.h"
#include "framework/core/shape.h"

namespace keel::h5_internal {

// Limits on the string lists a checkpoint holds (layer and weight names, JSON documents): far above
// any real model, far below what a corrupt header could make a reader allocate.
constexpr size_t kMaxStringCount = size_t{1} << 20;
constexpr size_t kMaxStringBytes = size_t{1} << 30;

// The attribute that carries a dataset's checksum: zlib's CRC-32 of its stored bytes, as uint32.
inline constexpr const char* kChecksumAttr = "keel_crc32";
uint32_t crc32_of(const void* bytes, size_t size);

// keel may be linked against an HDF5 built without its thread-safe option, which must not be
// entered from two threads at once; so every call, including the closing of ids, holds this lock.
// (Debian's serial build happens to be thread-safe; the lock then costs little.) Recursive so that
// a public method may call another while holding it.
std::recursive_mutex& hdf5_mutex();

// Held around every use of HDF5. It also turns off HDF5's printing of its error stack to stderr,
// since failures are reported through CheckpointError instead. That setting is per thread in a
// thread-safe HDF5 (and global otherwise), hence once per thread.
class Hdf5Lock {
 public:
  Hdf5Lock() : lock_(hdf5_mutex()) {
    thread_local bool silenced = false;
    if (!silenced) {
      H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
      silenced = true;
    }
  }

 private:
  std::lock_guard<std::recursive_mutex> lock_;
};

// Owns one HDF5 id of any kind (file, group, dataset, attribute, type, space, property list).
// Contract: destroyed only while the HDF5 lock is held.
class Id {
 public:
  Id() = default;
  explicit Id(hid_t id) : id_(id) {}
  Id(Id&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)) {}
  Id& operator=(Id&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = std::exchange(other.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  ~Id() { reset(); }

  hid_t get() const { return id_; }
  void reset() {
    if (id_ >= 0) H5Idec_ref(id_);
    id_ = H5I_INVALID_HID;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// The innermost description on HDF5's error stack, e.g. "truncated file: eof = 1024, ...".
// Must be called right after the failing call: the next HDF5 API call clears the stack.
std::string hdf5_detail();

// "a//b/" -> {"a", "b"}; "/" and "" -> {}.
std::vector<std::string> split_path(const std::string& path);

// The absolute form used both for HDF5 calls and in messages: "/model_weights/dense".
std::string absolute_path(const std::string& path);

// Shape of a dataspace; {} for a scalar. Null dataspaces (no data at all) are reported as false.
bool space_shape(hid_t space, Shape* shape);

// A short human name for a stored type: "float32", "int64", "string", ...
std::string type_name(hid_t type);

// A variable-length string type in `cset` (h5py's encoding of a Python str when cset is UTF-8).
Id variable_string_type(H5T_cset_t cset);
// An object creation property list of class `cls` that stores no timestamps, so that the same
// content always gives the same file, byte for byte.
Id untimed_creation_plist(hid_t cls);
// A fixed-length, null-padded string type of `width` bytes (at least 1) in `cset`.
Id fixed_string_type(size_t width, H5T_cset_t cset);

// Private helpers that need the file; kept out of h5_file.h so that it does not need <hdf5.h>.
// Contract: every function here is called with the HDF5 lock held.
struct H5FileImpl {
  const std::string& file;
  hid_t id;
  bool strict = false;  // H5File::set_strict: checksums required, variable-length strings refused

  [[noreturn]] void fail(const std::string& what) const;
  // Throws with HDF5's own description appended when an HDF5 call returned failure.
  template <typename T>
  T check(T result, const std::string& what) const {
    if (result < 0) fail(what + hdf5_detail());
    return result;
  }
  Id check_id(hid_t result, const std::string& what) const;

  // One of H5I_GROUP / H5I_DATASET for an existing object.
  H5I_type_t object_kind(const std::string& abs) const;

  bool exists(const std::string& path) const;

  // Before creating `abs`: every existing ancestor must be a group (missing ones are created by
  // the link-creation property list), and `abs` itself must not exist.
  void check_creatable(const std::string& abs) const;

  // Creates `abs` and every missing group above it (check_creatable first).
  void create_groups(const std::string& abs) const;

  // Writes a new scalar-or-array dataset of `file_type` from `data` in `mem_type`.
  void create_dataset(const std::string& path, hid_t file_type, hid_t mem_type, const Shape& shape,
                      const void* data) const;

  Id open_dataset(const std::string& abs) const;

  Shape shape_of(hid_t space, const std::string& what) const;

  Id open_object(const std::string& abs) const;

  // Creates attribute `name` on `object`, replacing an existing one (as h5py's attrs[name] = v).
  void write_attr(const std::string& object, const std::string& name, hid_t file_type,
                  hid_t mem_type, hid_t space, const void* data, bool has_data) const;

  Id open_attr(const std::string& abs, const std::string& name) const;

  // Reads every element of a string-typed attribute or dataset, whether stored as variable- or
  // fixed-length. `read(mem_type, buffer)` is H5Aread or H5Dread on the object.
  // At most `max_count` strings: a damaged or hostile file can declare any element count, and the
  // buffers are sized from it, so it is checked before anything is allocated.
  template <typename Read>
  std::vector<std::string> read_strings(hid_t file_type, hid_t space, const std::string& what,
                                        size_t max_count, Read read) const {
    if (H5Tget_class(file_type) != H5T_STRING)
      fail(what + " is " + type_name(file_type) + ", expected a string");
    hssize_t count = check(H5Sget_simple_extent_npoints(space), "cannot inspect " + what);
    const size_t n = static_cast<size_t>(count);
    if (n > max_count) {
      fail(what + " holds " + std::to_string(n) + " strings, expected at most " + std::to_string(max_count));
    }
    std::vector<std::string> result;
    if (n == 0) return result;
    H5T_cset_t cset = check(H5Tget_cset(file_type), "cannot inspect " + what);
    // Same character set in memory as on disk: HDF5 refuses to convert between ASCII and UTF-8.
    if (check(H5Tis_variable_str(file_type), "cannot inspect " + what) > 0) {
      if (strict) fail(what + " is a variable-length string, which keel never writes: the file is damaged");
      Id mem_type = variable_string_type(cset);
      if (mem_type.get() < 0) fail("cannot read " + what + hdf5_detail());
      std::vector<char*> buffer(n, nullptr);
      // HDF5 allocates each string; a read that fails part-way may leave some of them in `buffer`, so
      // they are reclaimed either way (HDF5's message taken first: the next API call clears it).
      const herr_t status = read(mem_type.get(), buffer.data());
      const std::string detail = status < 0 ? hdf5_detail() : std::string();
      if (status >= 0) {
        result.reserve(n);
        for (char* s : buffer) result.emplace_back(s ? s : "");
      }
#if H5_VERSION_GE(1, 12, 0)
      H5Treclaim(mem_type.get(), space, H5P_DEFAULT, buffer.data());
#else
      H5Dvlen_reclaim(mem_type.get(), space, H5P_DEFAULT, buffer.data());
#endif
      if (status < 0) fail("cannot read " + what + detail);
      return result;
    }
    size_t width = H5Tget_size(file_type);
    if (width == 0) fail("cannot inspect " + what + hdf5_detail());
    if (width > kMaxStringBytes / n) {
      fail(what + " declares " + std::to_string(n) + " strings of " + std::to_string(width) +
           " bytes, more than a checkpoint holds");
    }
    Id mem_type = check_id(H5Tcopy(H5T_C_S1), "cannot create a string type");
    check(H5Tset_size(mem_type.get(), width), "cannot create a string type");
    check(H5Tset_cset(mem_type.get(), cset), "cannot create a string type");
    // Null-padded in memory: HDF5 converts space-padded and null-terminated storage into it.
    check(H5Tset_strpad(mem_type.get(), H5T_STR_NULLPAD), "cannot create a string type");
    std::vector<char> buffer(n * width, '\0');
    check(read(mem_type.get(), buffer.data()), "cannot read " + what);
    result.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const char* s = buffer.data() + i * width;
      result.emplace_back(s, strnlen(s, width));
    }
    return result;
  }

  std::vector<std::string> read_attr_strings(const std::string& object, const std::string& name,
                                             bool allow_any_empty) const;

  // Checksums (h5_file_checksum.cc): `bytes` are a dataset's values as stored (little-endian).
  void write_checksum(const std::string& abs, const void* bytes, size_t size) const;
  // Compares with the dataset's kChecksumAttr; a dataset without one passes unless strict.
  void verify_checksum(hid_t dataset, const std::string& what, const void* bytes, size_t size) const;

  // Reads one integer element (attribute or dataset) as int64, refusing values that overflow.
  template <typename Read>
  int64_t read_one_int64(hid_t file_type, hid_t space, const std::string& what, Read read) const {
    if (H5Tget_class(file_type) != H5T_INTEGER)
      fail(what + " is " + type_name(file_type) + ", expected an integer");
    hssize_t count = check(H5Sget_simple_extent_npoints(space), "cannot inspect " + what);
    if (count != 1) fail(what + " has " + std::to_string(count) + " elements, expected 1");
    if (H5Tget_sign(file_type) == H5T_SGN_NONE && H5Tget_size(file_type) >= sizeof(int64_t)) {
      uint64_t value = 0;
      check(read(H5T_NATIVE_UINT64, &value), "cannot read " + what);
      if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(what + " = " + std::to_string(value) + " does not fit in int64");
      return static_cast<int64_t>(value);
    }
    int64_t value = 0;
    check(read(H5T_NATIVE_INT64, &value), "cannot read " + what);
    return value;
  }
};

}  // namespace keel::h5_internal
