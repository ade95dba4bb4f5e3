// A small RAII wrapper over the HDF5 C API: the low-level I/O under keel's checkpoints.
//
// Objects are named by paths such as "model_weights/dense/dense/kernel:0" (a leading '/' is
// optional; ':' is an ordinary character in HDF5 names). The on-disk encodings are chosen to match
// what h5py writes for Keras, so files are readable by h5py and by Keras's legacy `load_weights`:
//   float data          float32 little-endian (H5T_IEEE_F32LE), contiguous, uncompressed
//   int64               scalar H5T_STD_I64LE
//   string (dataset)    scalar fixed-length, null-padded UTF-8 of width max(len, 1) (h5py reads it
//                       as bytes; Keras decodes it)
//   string attribute    the same
//   string-list attr    1-D fixed-length, null-padded ASCII of width max(len) (a numpy 'S' array,
//                       as Keras writes `layer_names` / `weight_names`)
//
// Thread safety: every HDF5 call in keel goes through one process-wide mutex, so that an HDF5
// built without its thread-safe option is safe too. Different H5File objects may be used from
// different threads; one H5File must not be used by two threads at once. HDF5's printing of errors
// to stderr is turned off (in every thread that uses H5File).
//
// Checksums: every dataset H5File writes carries an attribute `keel_crc32`, zlib's CRC-32 of its
// stored (little-endian) bytes: the float32 or int64 values, or the string's bytes. Every read checks
// the bytes it returns against it, when present. h5py and Keras ignore the attribute.
//
// Strict mode (set_strict, for files keel wrote in checkpoint format >= 2): a dataset without a
// checksum is refused, and so is any variable-length string. keel writes strings fixed-length, so
// that its files have no HDF5 global heap: libhdf5 (1.10) crashes on a damaged global heap, while
// everything else in a 1.8-format file is guarded by HDF5's own metadata checksums or by keel's.
//
// Errors: every failure throws CheckpointError naming the file and the object path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/checkpoint/checkpoint_error.h"
#include "framework/core/shape.h"

namespace keel {

class H5File {
 public:
  // Creates (truncating) a file for writing.
  static H5File create(const std::string& path);
  // Opens an existing file read-only. A missing file, a directory, a non-HDF5 or truncated file
  // throws CheckpointError rather than crashing.
  static H5File open_read(const std::string& path);

  H5File(H5File&& other) noexcept;
  H5File& operator=(H5File&& other) noexcept;
  H5File(const H5File&) = delete;
  H5File& operator=(const H5File&) = delete;
  // Closes silently; call close() to learn whether the final flush succeeded.
  ~H5File();

  // Flushes and closes the file; throws CheckpointError on failure. Afterwards every other method
  // throws; calling close() again is a no-op.
  void close();
  bool is_open() const { return id_ >= 0; }
  const std::string& path() const { return path_; }

  // --- structure ---
  // Creates the group and any missing intermediate groups; a no-op if the group already exists.
  void create_group(const std::string& path);
  // True if an object (group or dataset) exists at `path`; false, not an error, when intermediate
  // groups are missing. "/" always exists.
  bool exists(const std::string& path);
  // Names of the direct members of a group, sorted by name.
  std::vector<std::string> children(const std::string& group_path);

  // --- datasets ---
  // Writes a float32 dataset of `shape` (empty shape = scalar) from num_elements(shape) floats at
  // `data`, creating intermediate groups. Throws if the object already exists.
  void write_floats(const std::string& path, const Shape& shape, const float* data);
  // The dataset's shape; {} for a scalar.
  Shape dataset_shape(const std::string& path);
  // Reads a float32 dataset into `out` (room for num_elements(expected_shape) floats). Throws if the
  // dataset is missing, is not float32, or its shape differs from `expected_shape`.
  void read_floats(const std::string& path, const Shape& expected_shape, float* out);

  void write_int64(const std::string& path, int64_t value);
  // Accepts any integer storage that converts to int64 without overflow.
  int64_t read_int64(const std::string& path);

  // Contract: `value` must not contain '\0' (HDF5 variable-length strings are C strings).
  void write_string(const std::string& path, const std::string& value);
  // Accepts variable- and fixed-length string storage.
  std::string read_string(const std::string& path);

  // --- checksums and strictness (see the header comment) ---
  // From now on, a dataset without a checksum and a variable-length string are refused.
  void set_strict(bool on) { strict_ = on; }
  // Reads every dataset in the file and checks its checksum; throws CheckpointError naming the
  // first damaged one. Returns the number of datasets read.
  int64_t verify_checksums();
  // zlib's CRC-32 of `size` bytes (the checksum above), for checksums of other things.
  static uint32_t crc32(const void* bytes, size_t size);
  // The most float values one dataset may declare for verify_checksums (2^31: 8 GiB).
  static constexpr uint64_t kMaxVerifiedElements = uint64_t{1} << 31;

  // --- attributes on any object ("/" for the root); setting an existing attribute replaces it ---
  void set_attr_string(const std::string& object, const std::string& name, const std::string& value);
  // Contract: entries are ASCII without '\0'. An empty list is written as a 0-length array.
  void set_attr_string_list(const std::string& object, const std::string& name,
                            const std::vector<std::string>& values);
  void set_attr_int64(const std::string& object, const std::string& name, int64_t value);

  bool has_attr(const std::string& object, const std::string& name);
  // Accepts a scalar or 1-element string attribute, variable- or fixed-length.
  std::string get_attr_string(const std::string& object, const std::string& name);
  // Accepts a 1-D (or scalar) fixed- or variable-length string attribute; a 0-element attribute
  // of any type (numpy writes `np.asarray([])` as float64) reads as an empty list.
  std::vector<std::string> get_attr_string_list(const std::string& object, const std::string& name);
  int64_t get_attr_int64(const std::string& object, const std::string& name);

 private:
  H5File(std::string path, int64_t id) : path_(std::move(path)), id_(id) {}
  int64_t checked_id() const;  // the file id, or throws if closed

  std::string path_;
  int64_t id_ = -1;
  bool strict_ = false;  // hid_t; int64_t here so this header does not pull in <hdf5.h>
};

}  // namespace keel
