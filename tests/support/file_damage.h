// Damaging files on purpose, for tests of what keel detects: flip bits at an offset, find bytes,
// locate a dataset's stored values in an HDF5 file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace keel::testing {

// XORs the byte at `offset` of `file` with `mask`.
void flip_byte(const std::string& file, int64_t offset, unsigned char mask = 0x01);
// The first offset of `text` in the file's bytes, or -1.
int64_t find_bytes(const std::string& file, const std::string& text);
// Where a contiguous dataset's values begin in the file (H5Dget_offset), or -1.
int64_t dataset_offset(const std::string& file, const std::string& dataset);
// Every dataset in an HDF5 file, as absolute paths ("/model_weights/dense/dense/kernel:0").
std::vector<std::string> dataset_paths(const std::string& file);

}  // namespace keel::testing
