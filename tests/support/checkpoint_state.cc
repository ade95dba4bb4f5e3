#include "tests/support/checkpoint_state.h"

#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstring>

#include "framework/checkpoint/h5_file.h"

namespace keel::testing {

std::map<std::string, std::vector<float>> read_checkpoint_values(const std::string& path) {
  H5File f = H5File::open_read(path);
  std::map<std::string, std::vector<float>> out;
  std::vector<std::string> todo = {"model_weights", "optimizer_weights"};
  if (f.exists("keel/best_weights")) todo.push_back("keel/best_weights");  // EarlyStopping's
  while (!todo.empty()) {
    const std::string p = todo.back();
    todo.pop_back();
    if (p.ends_with("/iterations:0")) {
      out[p] = {static_cast<float>(f.read_int64(p))};
      continue;
    }
    bool is_dataset = true;
    Shape shape;
    try {
      shape = f.dataset_shape(p);
    } catch (const CheckpointError&) {
      is_dataset = false;  // a group
    }
    if (is_dataset) {
      std::vector<float>& v = out[p];
      v.resize(static_cast<size_t>(num_elements(shape)));
      f.read_floats(p, shape, v.data());
    } else {
      for (const std::string& c : f.children(p)) todo.push_back(p + "/" + c);
    }
  }
  return out;
}

void expect_bit_identical(const std::string& a, const std::string& b, size_t min_values) {
  const auto sa = read_checkpoint_values(a), sb = read_checkpoint_values(b);
  ASSERT_EQ(sa.size(), sb.size());
  ASSERT_GE(sa.size(), min_values);
  for (const auto& [name, values] : sa) {
    ASSERT_TRUE(sb.count(name)) << name;
    ASSERT_EQ(values.size(), sb.at(name).size()) << name;
    EXPECT_EQ(std::memcmp(values.data(), sb.at(name).data(), values.size() * sizeof(float)), 0)
        << name << " differs between " << a << " and " << b;
  }
}

nlohmann::json train_state_json(const std::string& checkpoint) {
  return nlohmann::json::parse(H5File::open_read(checkpoint).read_string("keel/train_state"));
}

void rewrite_train_state(const std::string& checkpoint, const nlohmann::json& state) {
  const std::string text = state.dump();
  hid_t f = H5Fopen(checkpoint.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0) << checkpoint;
  H5Ldelete(f, "/keel/train_state", H5P_DEFAULT);
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, text.size());
  hid_t scalar = H5Screate(H5S_SCALAR);
  hid_t d = H5Dcreate2(f, "/keel/train_state", type, scalar, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data());
  const uint32_t crc = H5File::crc32(text.data(), text.size());
  hid_t a = H5Acreate2(d, "keel_crc32", H5T_STD_U32LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_UINT32, &crc);
  H5Aclose(a);
  H5Dclose(d);
  H5Sclose(scalar);
  H5Tclose(type);
  H5Fclose(f);
}

}  // namespace keel::testing
