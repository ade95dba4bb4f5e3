#include "tests/support/file_damage.h"

#include <hdf5.h>

#include <fstream>
#include <iterator>

namespace keel::testing {

void flip_byte(const std::string& file, int64_t offset, unsigned char mask) {
  std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(offset);
  char c = 0;
  io.read(&c, 1);
  c = static_cast<char>(static_cast<unsigned char>(c) ^ mask);
  io.seekp(offset);
  io.write(&c, 1);
}

int64_t find_bytes(const std::string& file, const std::string& text) {
  std::ifstream in(file, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const size_t at = bytes.find(text);
  return at == std::string::npos ? -1 : static_cast<int64_t>(at);
}

int64_t dataset_offset(const std::string& file, const std::string& dataset) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return -1;
  hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  const haddr_t offset = d < 0 ? HADDR_UNDEF : H5Dget_offset(d);
  if (d >= 0) H5Dclose(d);
  H5Fclose(f);
  return offset == HADDR_UNDEF ? -1 : static_cast<int64_t>(offset);
}

std::vector<std::string> dataset_paths(const std::string& file) {
  std::vector<std::string> paths;
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return paths;
  auto visit = [](hid_t, const char* name, const H5O_info_t* info, void* client) -> herr_t {
    if (info->type == H5O_TYPE_DATASET) static_cast<std::vector<std::string>*>(client)->push_back(std::string("/") + name);
    return 0;
  };
#if H5_VERSION_GE(1, 12, 0)
  H5Ovisit3(f, H5_INDEX_NAME, H5_ITER_INC, visit, &paths, H5O_INFO_BASIC);
#else
  H5Ovisit2(f, H5_INDEX_NAME, H5_ITER_INC, visit, &paths, H5O_INFO_BASIC);
#endif
  H5Fclose(f);
  return paths;
}

}  // namespace keel::testing
