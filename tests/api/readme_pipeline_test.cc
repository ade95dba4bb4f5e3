// The README's input-pipeline example (the seed's TFRecord -> JPEG -> 224x224 pipeline), compiled and
// run as written on a small TFRecord set made here.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <vector>

#include "framework/data/data.h"
#include "datasets/example.h"
#include "datasets/image_codec.h"
#include "datasets/image_ops.h"
#include "datasets/preprocessing.h"
#include "datasets/tfrecord_dataset.h"
#include "framework/device/context.h"
#include "tests/support/cli_runner.h"

namespace {

TEST(ReadmePipeline, TFRecordsOfJpegsToBatchesOf224x224) {
  const std::string dir = keel::testing::make_temp_dir("keel-readme-pipeline");
  std::vector<uint8_t> pixels(28 * 28);
  for (int shard = 0; shard < 2; ++shard) {
    keel::TFRecordWriter writer(dir + "/train-0000" + std::to_string(shard) + "-of-00002.tfrecord");
    for (int i = 0; i < 10; ++i) {
      for (size_t k = 0; k < pixels.size(); ++k) pixels[k] = static_cast<uint8_t>(k + i);
      writer.write(keel::ExampleBuilder()
                       .add_bytes("image", keel::encode_jpeg(pixels.data(), 28, 28, 1))
                       .add_int64("label", {shard * 10 + i})
                       .serialize());
    }
    writer.close();
  }
  const std::string pattern = dir + "/train-*.tfrecord";

  // --- as in README.md ---
  keel::FeatureSpec spec{{"image", keel::FixedLenFeature{{}, keel::FeatureType::kString}},
                         {"label", keel::FixedLenFeature{{}, keel::FeatureType::kInt64}}};
  auto parse = [spec](const keel::Element& e) {
    auto f = keel::parse_single_example(e[0].string_value(), spec);
    keel::Tensor image = keel::convert_image_dtype(keel::decode_image(f["image"].string_value(), 3));  // (h, w, 3) in [0, 1]
    return keel::Element{keel::resize(image, 224, 224), f["label"]};
  };
  auto train = keel::data::list_files(pattern, /*shuffle=*/true, /*seed=*/1)
                   .interleave([](const keel::Element& f) { return keel::TFRecordDataset({f[0].string_value()}); },
                               /*cycle_length=*/2, /*block_length=*/1, keel::data::AUTOTUNE)
                   .shuffle(1000, /*seed=*/1)
                   .map(parse, keel::data::AUTOTUNE)
                   .batch(8, /*drop_remainder=*/true)
                   .prefetch(keel::data::AUTOTUNE);
  // ---

  keel::Iterator it = train.make_iterator(/*epoch=*/0);
  std::vector<float> labels;
  int batches = 0;
  while (auto batch = it.next()) {
    ASSERT_EQ((*batch)[0].shape(), (keel::Shape{8, 224, 224, 3}));
    ASSERT_EQ((*batch)[1].shape(), (keel::Shape{8}));
    for (float v : (*batch)[1].to_vector()) labels.push_back(v);
    ++batches;
  }
  EXPECT_EQ(batches, 2);  // 20 examples, drop_remainder
  std::sort(labels.begin(), labels.end());
  EXPECT_EQ(std::adjacent_find(labels.begin(), labels.end()), labels.end()) << "each example at most once";
  std::filesystem::remove_all(dir);
}

// The README's augmentation example, as written, on 512 images of 32x32x1.
TEST(ReadmePipeline, AugmentationLayersInAKeyedMap) {
  keel::HostScope host;
  std::vector<float> pixels(512 * 32 * 32), ids(512);
  for (size_t k = 0; k < pixels.size(); ++k) pixels[k] = static_cast<float>(k % 97) / 97.0f;
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<float>(i % 10);
  const keel::Tensor images = keel::Tensor::from_vector({512, 32, 32, 1}, pixels);
  const keel::Tensor labels = keel::Tensor::from_vector({512}, ids);

  keel::preprocessing::Augmentation augment(
      {std::make_shared<keel::preprocessing::RandomFlip>("horizontal"),
       std::make_shared<keel::preprocessing::ZeroPadding2D>(4, 4),
       std::make_shared<keel::preprocessing::RandomCrop>(32, 32)}, /*seed=*/1);
  auto train = keel::data::from_tensor_slices({images, labels})      // images (N, 32, 32, 1)
                   .shuffle(60000, /*seed=*/1)
                   .map_with_key(augment.map_function(), keel::data::AUTOTUNE)
                   .batch(256, /*drop_remainder=*/true);

  keel::Iterator a = train.make_iterator(0), b = train.make_iterator(0);
  for (int i = 0; i < 2; ++i) {
    const auto x = a.next(), y = b.next();
    ASSERT_TRUE(x && y);
    EXPECT_EQ((*x)[0].shape(), (keel::Shape{256, 32, 32, 1}));
    EXPECT_EQ((*x)[0].to_vector(), (*y)[0].to_vector());  // the same epoch, the same images
  }
  EXPECT_FALSE(a.next());
}

}  // namespace
