// Reader for IDX files (the MNIST / Fashion-MNIST container), gzip'd or plain.
//
// Format: magic bytes 00 00 <type> <ndims>, then ndims big-endian uint32 dims, then the elements in
// row-major order. Only type 0x08 (unsigned byte) is supported — the type every MNIST-family file uses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace keel {

struct IdxArray {
  std::vector<int64_t> dims;  // e.g. (60000, 28, 28) for an images file, (60000) for labels
  std::vector<uint8_t> data;  // product(dims) bytes, row-major
};

// Reads a whole IDX file; gzip is detected by its magic bytes (1f 8b), so the name does not matter.
// Concatenated gzip members are accepted (as gunzip does). Throws DataError, naming `path`, if the
// file is missing or unreadable, the gzip stream is truncated or corrupt, the magic or element type is
// wrong, the header dims overflow, the data is shorter than the dims say, or bytes follow the data.
// Safe on arbitrary input: it never reads out of bounds, and memory grows with the bytes actually
// present rather than with what the header claims.
IdxArray read_idx(const std::string& path);

}  // namespace keel
