#include "datasets/fashion_mnist.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/data/data_error.h"
#include "framework/device/context.h"
#include "framework/device/ledger.h"

namespace keel {
namespace {

using ::testing::HasSubstr;
using Bytes = std::vector<uint8_t>;

// Loads `split` on a thread whose context is a mirrored 2-core device, and checks nothing was charged.
LabeledImages load_checking_host(const std::string& split) {
  Ledger ledger(DeviceSpec::custom(2, 0));
  DeviceContext mirrored;
  mirrored.ledger = &ledger;
  mirrored.core = -1;
  ContextScope device(mirrored);
  LabeledImages data = load_fashion_mnist(split);
  for (int c = 0; c < ledger.num_cores(); ++c) EXPECT_EQ(ledger.core(c).total().allocated, 0) << "core " << c;
  EXPECT_TRUE(data.images.storage().charges().empty());
  EXPECT_TRUE(data.labels.storage().charges().empty());
  return data;
}

void check_split(const LabeledImages& data, int64_t n) {
  ASSERT_EQ(data.images.shape(), (Shape{n, 28, 28}));
  ASSERT_EQ(data.labels.shape(), (Shape{n}));
  const float* pixels = data.images.data();
  const int64_t count = data.images.size();
  EXPECT_EQ(*std::min_element(pixels, pixels + count), 0.0f);
  EXPECT_EQ(*std::max_element(pixels, pixels + count), 1.0f);
  const double mean = std::accumulate(pixels, pixels + count, 0.0) / static_cast<double>(count);
  // pixel / 255 exactly: the value times 255 is (very nearly) an integer.
  int off_grid = 0;
  for (int64_t i = 0; i < data.images.size(); i += 97) {
    const float v = data.images.data()[i] * 255.0f;
    if (std::abs(v - std::round(v)) > 1e-3f) ++off_grid;
  }
  EXPECT_EQ(off_grid, 0);
  EXPECT_GT(mean, 0.2);  // Fashion-MNIST's mean pixel is about 0.286
  EXPECT_LT(mean, 0.4);
  std::array<int64_t, 10> histogram{};
  for (float label : data.labels.to_vector()) {
    ASSERT_EQ(label, std::floor(label));
    ASSERT_GE(label, 0.0f);
    ASSERT_LE(label, 9.0f);
    ++histogram[static_cast<size_t>(label)];
  }
  for (int c = 0; c < 10; ++c) EXPECT_EQ(histogram[static_cast<size_t>(c)], n / 10) << "class " << c;
}

TEST(FashionMnistTest, TrainSplit) {
  const auto start = std::chrono::steady_clock::now();
  const LabeledImages train = load_checking_host("train");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("loaded 60000 train images in %.3f s\n", seconds);
  check_split(train, 60000);
  // The first training image is an ankle boot (class 9), as in the published dataset.
  EXPECT_EQ(train.labels.data()[0], 9.0f);
}

TEST(FashionMnistTest, TestSplit) {
  const LabeledImages test = load_checking_host("test");
  check_split(test, 10000);
  EXPECT_EQ(test.labels.data()[0], 9.0f);
}

TEST(FashionMnistTest, UnknownSplit) {
  EXPECT_THROW(load_fashion_mnist("validation"), std::invalid_argument);
}

TEST(FashionMnistTest, MissingDirectorySaysHowToInstall) {
  try {
    load_fashion_mnist("train", "/nonexistent/keel-fashion");
    FAIL() << "no error for a missing directory";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("Fashion-MNIST not found: /nonexistent/keel-fashion/train-images-idx3-ubyte.gz "
                          "does not exist"));
    EXPECT_THAT(e.what(), HasSubstr("apt-get install dataset-fashion-mnist"));
    EXPECT_THAT(e.what(), HasSubstr("--data-dir"));
  }
}

Bytes read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), {});
}

Bytes gunzip(const Bytes& gz) {
  z_stream s{};
  EXPECT_EQ(inflateInit2(&s, 16 + MAX_WBITS), Z_OK);
  Bytes out(1 << 20);
  s.next_in = const_cast<Bytef*>(gz.data());
  s.avail_in = static_cast<uInt>(gz.size());
  s.next_out = out.data();
  s.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(inflate(&s, Z_FINISH), Z_STREAM_END);
  out.resize(s.total_out);
  inflateEnd(&s);
  return out;
}

Bytes gzip(const Bytes& raw) {
  z_stream s{};
  EXPECT_EQ(deflateInit2(&s, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  Bytes out(deflateBound(&s, raw.size()) + 64);
  s.next_in = const_cast<Bytef*>(raw.data());
  s.avail_in = static_cast<uInt>(raw.size());
  s.next_out = out.data();
  s.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&s, Z_FINISH), Z_STREAM_END);
  out.resize(s.total_out);
  deflateEnd(&s);
  return out;
}

class DamagedCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("keel_fmnist_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    for (const char* name : {"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}) {
      std::filesystem::copy_file(std::filesystem::path(kFashionMnistDefaultDir) / name, dir_ / name,
                                 std::filesystem::copy_options::overwrite_existing);
    }
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Rewrites the test labels file after `edit` has changed its decompressed bytes.
  template <class Edit>
  std::string edit_labels(Edit edit) {
    const std::string path = (dir_ / "t10k-labels-idx1-ubyte.gz").string();
    Bytes raw = gunzip(read_file(path));
    edit(raw);
    const Bytes gz = gzip(raw);
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(gz.data()), static_cast<std::streamsize>(gz.size()));
    return path;
  }

  std::filesystem::path dir_;
};

TEST_F(DamagedCopyTest, IntactCopyLoads) {
  EXPECT_EQ(load_fashion_mnist("test", dir_.string()).labels.dim(0), 10000);
}

TEST_F(DamagedCopyTest, LabelOutOfRangeNamesFileAndIndex) {
  const std::string path = edit_labels([](Bytes& raw) { raw[8 + 4321] = 11; });  // 8 header bytes
  try {
    load_fashion_mnist("test", dir_.string());
    FAIL() << "label 11 accepted";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
    EXPECT_THAT(e.what(), HasSubstr("label 11 at index 4321"));
  }
}

TEST_F(DamagedCopyTest, CountMismatch) {
  const std::string path = edit_labels([](Bytes& raw) {
    raw.pop_back();
    raw[7] = static_cast<uint8_t>(raw[7] - 1);  // 10000 -> 9999 in the big-endian count
  });
  try {
    load_fashion_mnist("test", dir_.string());
    FAIL() << "9999 labels for 10000 images accepted";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr(path + " holds 9999 labels"));
  }
}

TEST_F(DamagedCopyTest, MissingLabelsFile) {
  std::filesystem::remove(dir_ / "t10k-labels-idx1-ubyte.gz");
  try {
    load_fashion_mnist("test", dir_.string());
    FAIL() << "missing labels file accepted";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("t10k-labels-idx1-ubyte.gz does not exist"));
    EXPECT_THAT(e.what(), HasSubstr("apt-get install dataset-fashion-mnist"));
  }
}

}  // namespace
}  // namespace keel
