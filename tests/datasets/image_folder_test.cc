// image_dataset_from_directory and its file index: Keras's class order and labels, resized images in
// [0, 255], batching, and clear errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "framework/data/data_error.h"
#include "datasets/image_codec.h"
#include "datasets/image_folder.h"
#include "tests/support/cli_runner.h"
#include "tests/support/dataset_elements.h"

namespace keel {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class ImageFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::make_temp_dir("keel-image-folder");
    // Class folders out of order on purpose; sizes differ per file; one stray non-image file.
    write("dogs", "b.png", 10, 12, 200);
    write("dogs", "a.png", 7, 5, 100);
    write("cats", "z.png", 4, 4, 50);
    fs::create_directories(dir_ + "/cats/nested");
    write("cats/nested", "c.PNG", 3, 9, 25);
    std::ofstream(dir_ + "/cats/notes.txt") << "not an image";
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::string& cls, const std::string& name, int64_t h, int64_t w, uint8_t value) {
    fs::create_directories(dir_ + "/" + cls);
    std::vector<uint8_t> pixels(static_cast<size_t>(h * w), value);
    std::ofstream(dir_ + "/" + cls + "/" + name, std::ios::binary) << encode_png(pixels.data(), h, w, 1);
  }

  std::string dir_;
};

TEST_F(ImageFolderTest, IndexSortsClassesAndFilesAndLabelsByClassIndex) {
  const ImageFolderIndex index = index_image_folder(dir_);
  EXPECT_EQ(index.class_names, (std::vector<std::string>{"cats", "dogs"}));
  EXPECT_EQ(index.paths, (std::vector<std::string>{dir_ + "/cats/nested/c.PNG", dir_ + "/cats/z.png",
                                                   dir_ + "/dogs/a.png", dir_ + "/dogs/b.png"}));
  EXPECT_EQ(index.labels, (std::vector<int64_t>{0, 0, 1, 1}));
  // Explicit class_names: exactly those, in that order.
  EXPECT_EQ(index_image_folder(dir_, {"dogs"}).labels, (std::vector<int64_t>{0, 0}));
}

TEST_F(ImageFolderTest, ImagesAreResizedToImageSizeInZeroTo255WithIntOrCategoricalLabels) {
  ImageDatasetOptions o;
  o.image_size = {6, 8};
  o.batch_size = 0;
  o.shuffle = false;
  o.color_mode = "rgb";
  const std::vector<Element> elements = testing::all(image_dataset_from_directory(dir_, o));
  ASSERT_EQ(elements.size(), 4u);
  const float expected_value[] = {25, 50, 100, 200};  // constant images stay constant when resized
  for (size_t i = 0; i < elements.size(); ++i) {
    ASSERT_EQ(elements[i][0].shape(), (Shape{6, 8, 3})) << i;
    for (float v : elements[i][0].to_vector()) ASSERT_EQ(v, expected_value[i]) << i;
  }
  EXPECT_EQ(testing::values(elements, 1), (std::vector<float>{0, 0, 1, 1}));

  o.label_mode = "categorical";
  o.batch_size = 3;
  const std::vector<Element> batches = testing::all(image_dataset_from_directory(dir_, o));
  ASSERT_EQ(batches.size(), 2u);  // 3 + 1: the last batch is smaller
  EXPECT_EQ(batches[0][0].shape(), (Shape{3, 6, 8, 3}));
  EXPECT_EQ(batches[0][1].shape(), (Shape{3, 2}));
  EXPECT_EQ(batches[1][1].to_vector(), (std::vector<float>{0, 1}));
}

TEST_F(ImageFolderTest, ShuffleIsAPermutationPerEpochFromTheSeed) {
  ImageFolderOptions o;
  o.seed = 5;
  const Dataset files = image_files_from_directory(dir_, o);
  std::vector<std::string> epoch0 = testing::strings(testing::all(files, 0));
  EXPECT_EQ(epoch0, testing::strings(testing::all(image_files_from_directory(dir_, o), 0)));
  std::sort(epoch0.begin(), epoch0.end());
  EXPECT_EQ(epoch0, index_image_folder(dir_).paths);
}

TEST_F(ImageFolderTest, BadFoldersAndFilesGiveMessagesNamingThem) {
  EXPECT_THROW(index_image_folder(dir_ + "/missing"), DataError);
  fs::create_directories(dir_ + "/empty");
  try {
    index_image_folder(dir_ + "/empty");
    FAIL();
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("no class sub-folders"));
  }
  EXPECT_THROW(index_image_folder(dir_, {"birds"}), DataError);
  std::ofstream(dir_ + "/dogs/broken.png", std::ios::binary) << "\x89PNG\r\n\x1a\n garbage";
  ImageDatasetOptions o;
  o.shuffle = false;
  o.batch_size = 0;
  try {
    testing::all(image_dataset_from_directory(dir_, o));
    FAIL() << "the broken file was decoded";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr(dir_ + "/dogs/broken.png: not a valid PNG"));
  }
  EXPECT_THROW(read_file_bytes(dir_ + "/dogs/none.png"), DataError);
}

}  // namespace
}  // namespace keel
