// Per-dataset checksums (framework/checkpoint/h5_file_checksum.cc): every dataset H5File writes
// carries keel_crc32; any flipped byte of its stored values is detected by the read that would
// return it, and by verify_checksums().
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "framework/checkpoint/h5_file.h"
#include "tests/support/file_damage.h"

namespace keel {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class H5FileChecksumTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("keel_h5_checksum_test_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A file with a float tensor, an int64 and a string, as a checkpoint holds them.
  std::string write_sample() {
    const std::string p = path("sample.h5");
    H5File f = H5File::create(p);
    f.write_floats("w/kernel:0", {4, 8}, values_.data());
    f.write_int64("w/iterations:0", 1234567);
    f.write_string("keel/train_state", "{\"step\": 700, \"config\": {\"model\": \"mlp\"}}");
    f.close();
    return p;
  }

  std::vector<float> values_ = [] {
    std::vector<float> v(32);
    for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * static_cast<float>(i) - 3.0f;
    return v;
  }();
  fs::path dir_;
};

using testing::dataset_offset;
using testing::find_bytes;
using testing::flip_byte;

TEST_F(H5FileChecksumTest, EveryDatasetCarriesItsChecksumAndReadsVerify) {
  const std::string p = write_sample();
  H5File f = H5File::open_read(p);
  f.set_strict(true);
  for (const char* d : {"w/kernel:0", "w/iterations:0", "keel/train_state"}) EXPECT_TRUE(f.has_attr(d, "keel_crc32")) << d;
  std::vector<float> out(32);
  f.read_floats("w/kernel:0", {4, 8}, out.data());
  EXPECT_EQ(out, values_);
  EXPECT_EQ(f.read_int64("w/iterations:0"), 1234567);
  EXPECT_EQ(f.verify_checksums(), 3);
  // The stored value is zlib's CRC-32 of the little-endian float32 bytes.
  EXPECT_EQ(f.get_attr_int64("w/kernel:0", "keel_crc32"), H5File::crc32(values_.data(), values_.size() * 4));
}

TEST_F(H5FileChecksumTest, EveryFlippedByteOfAFloatTensorIsDetected) {
  const std::string clean = write_sample();
  const int64_t offset = dataset_offset(clean, "/w/kernel:0");
  ASSERT_GE(offset, 0);
  for (int byte = 0; byte < 32 * 4; ++byte) {
    const std::string p = path("flipped.h5");
    fs::copy_file(clean, p, fs::copy_options::overwrite_existing);
    flip_byte(p, offset + byte, static_cast<unsigned char>(1u << (byte % 8)));
    H5File f = H5File::open_read(p);
    std::vector<float> out(32);
    try {
      f.read_floats("w/kernel:0", {4, 8}, out.data());
      ADD_FAILURE() << "byte " << byte << " flipped and not detected";
    } catch (const CheckpointError& e) {
      EXPECT_THAT(e.what(), HasSubstr("fails its checksum")) << byte;
      EXPECT_THAT(e.what(), HasSubstr("/w/kernel:0")) << byte;
    }
    EXPECT_THROW(f.verify_checksums(), CheckpointError) << byte;
  }
}

TEST_F(H5FileChecksumTest, FlippedIntegerAndStringBytesAreDetected) {
  const std::string clean = write_sample();
  {
    const std::string p = path("int.h5");
    fs::copy_file(clean, p);
    flip_byte(p, dataset_offset(p, "/w/iterations:0") + 2);
    H5File f = H5File::open_read(p);
    EXPECT_THROW(f.read_int64("w/iterations:0"), CheckpointError);
  }
  {
    // Find the string's bytes in the file.
    const std::string p = path("string.h5");
    fs::copy_file(clean, p);
    const int64_t at = find_bytes(p, "\"model\": \"mlp\"");
    ASSERT_GE(at, 0);
    flip_byte(p, at + 11, 0x02);  // "mlp" -> "mnp"
    H5File f = H5File::open_read(p);
    try {
      f.read_string("keel/train_state");
      ADD_FAILURE() << "a changed train state was read";
    } catch (const CheckpointError& e) {
      EXPECT_THAT(e.what(), HasSubstr("/keel/train_state fails its checksum"));
    }
  }
}

TEST_F(H5FileChecksumTest, ADatasetWithoutChecksumPassesOnlyWhenNoneIsRequired) {
  const std::string p = write_sample();
  {
    hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "/w/kernel:0", H5P_DEFAULT);
    ASSERT_GE(H5Adelete(d, "keel_crc32"), 0);
    H5Dclose(d);
    H5Fclose(f);
  }
  H5File f = H5File::open_read(p);
  std::vector<float> out(32);
  f.read_floats("w/kernel:0", {4, 8}, out.data());  // a file of a format without checksums
  EXPECT_EQ(out, values_);
  f.set_strict(true);
  try {
    f.read_floats("w/kernel:0", {4, 8}, out.data());
    ADD_FAILURE() << "read without its checksum";
  } catch (const CheckpointError& e) {
    EXPECT_THAT(e.what(), HasSubstr("has no checksum"));
  }
  EXPECT_THROW(f.verify_checksums(), CheckpointError);
}

TEST_F(H5FileChecksumTest, AWrongChecksumValueIsDetectedToo) {
  const std::string p = write_sample();
  {
    H5File f = H5File::open_read(p);
    const int64_t good = f.get_attr_int64("w/iterations:0", "keel_crc32");
    f.close();
    hid_t file = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t d = H5Dopen2(file, "/w/iterations:0", H5P_DEFAULT);
    hid_t a = H5Aopen(d, "keel_crc32", H5P_DEFAULT);
    const uint32_t bad = static_cast<uint32_t>(good) ^ 0x100u;
    ASSERT_GE(H5Awrite(a, H5T_NATIVE_UINT32, &bad), 0);
    H5Aclose(a);
    H5Dclose(d);
    H5Fclose(file);
  }
  H5File f = H5File::open_read(p);
  EXPECT_THROW(f.read_int64("w/iterations:0"), CheckpointError);
}

}  // namespace
}  // namespace keel
