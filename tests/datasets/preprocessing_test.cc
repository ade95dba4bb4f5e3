// Keras's augmentation layers (datasets/preprocessing.h): each layer's transform by hand or through
// affine_transform (itself checked against torch in image_ops_test), its draws' ranges, inference
// behaviour, the --augment grammar, and keyed augmentation in a parallel pipeline.
#include "datasets/preprocessing.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "framework/core/random.h"
#include "framework/device/context.h"
#include "tests/support/dataset_elements.h"

namespace keel::preprocessing {
namespace {

using ::testing::HasSubstr;

Tensor iota(int64_t h, int64_t w, int64_t c, float start = 0) {
  std::vector<float> v(static_cast<size_t>(h * w * c));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<float>(i);
  return Tensor::from_vector({h, w, c}, v);
}

TEST(Preprocessing, RandomFlipModes) {
  HostScope host;
  const Tensor img = iota(3, 4, 1);
  const std::vector<float> src = img.to_vector();
  std::set<std::vector<float>> horizontal, vertical, both;
  for (uint64_t seed = 0; seed < 64; ++seed) {
    horizontal.insert(RandomFlip("horizontal")(img, seed).to_vector());
    vertical.insert(RandomFlip("vertical")(img, seed).to_vector());
    both.insert(RandomFlip()(img, seed).to_vector());
    EXPECT_EQ(RandomFlip()(img, seed, /*training=*/false).to_vector(), src);
  }
  const std::vector<float> lr = {3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8};
  const std::vector<float> ud = {8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3};
  const std::vector<float> rot = {11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
  EXPECT_EQ(horizontal, (std::set<std::vector<float>>{src, lr}));
  EXPECT_EQ(vertical, (std::set<std::vector<float>>{src, ud}));
  EXPECT_EQ(both, (std::set<std::vector<float>>{src, lr, ud, rot}));  // Keras's default: each on its own
  EXPECT_THROW(RandomFlip("diagonal"), std::invalid_argument);
}

TEST(Preprocessing, RandomCropTrainsOnAWindowAndInfersTheCentre) {
  HostScope host;
  const Tensor img = iota(6, 6, 1);
  const RandomCrop crop(4, 4);
  std::set<float> corners;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const std::vector<float> v = crop(img, seed).to_vector();
    ASSERT_EQ(v.size(), 16u);
    const int64_t top = static_cast<int64_t>(v[0]) / 6, left = static_cast<int64_t>(v[0]) % 6;
    for (int64_t i = 0; i < 16; ++i) ASSERT_EQ(v[static_cast<size_t>(i)], static_cast<float>((top + i / 4) * 6 + left + i % 4));
    corners.insert(v[0]);
  }
  EXPECT_EQ(corners.size(), 9u);  // every one of the 3 x 3 offsets
  // Inference (Keras 2, and Keras 3's docstring): the largest centred window of the target's aspect
  // ratio, here the whole 6 x 6, resized to 4 x 4 (bilinear, half-pixel centres: rows and columns
  // 0.25, 1.75, 3.25, 4.75 of the linear ramp 6 y + x, exact in float).
  EXPECT_EQ(crop(img, 0, /*training=*/false).to_vector(),
            (std::vector<float>{1.75f, 3.25f, 4.75f, 6.25f, 10.75f, 12.25f, 13.75f, 15.25f,  //
                                19.75f, 21.25f, 22.75f, 24.25f, 28.75f, 30.25f, 31.75f, 33.25f}));
  // Keras: an image not larger along both axes takes the inference path even in training: the
  // largest centred window of the target's aspect ratio (4 x 6 -> 2:1 wants 4 x 2 at column 2)...
  const Tensor wide = iota(4, 6, 1);
  const std::vector<float> window = RandomCrop(4, 2)(wide, 3).to_vector();
  EXPECT_EQ(window, (std::vector<float>{2, 3, 8, 9, 14, 15, 20, 21}));
  // ... resized (bilinear, half-pixel centres) when it is not the target size: 4 x 4 centre of a 4 x 6
  // -> 2 x 2 averages each 2 x 2 block.
  EXPECT_EQ(RandomCrop(2, 2)(wide, 0, false).to_vector(), (std::vector<float>{4.5f, 6.5f, 16.5f, 18.5f}));
  EXPECT_EQ(crop.output_shape({6, 6, 3}), (Shape{4, 4, 3}));
  EXPECT_THROW(RandomCrop(0, 4), std::invalid_argument);
}

TEST(Preprocessing, PaddingThenCropIsTorchvisionsRandomCropWithPadding) {
  HostScope host;
  const Tensor img = iota(4, 4, 1, 1.0f);  // no zero pixel, so padding is visible
  const Augmentation pad_crop({std::make_shared<ZeroPadding2D>(2, 2), std::make_shared<RandomCrop>(4, 4)}, 7);
  std::set<std::pair<int, int>> shifts;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    const std::vector<float> v = pad_crop(img, seed).to_vector();
    // Find the shift: the output is the image moved by (dy, dx) in [-2, 2], zeros elsewhere.
    bool found = false;
    for (int dy = -2; dy <= 2 && !found; ++dy) {
      for (int dx = -2; dx <= 2 && !found; ++dx) {
        bool match = true;
        for (int y = 0; y < 4 && match; ++y) {
          for (int x = 0; x < 4 && match; ++x) {
            const int sy = y - dy, sx = x - dx;
            const float want = (sy >= 0 && sy < 4 && sx >= 0 && sx < 4) ? static_cast<float>(sy * 4 + sx + 1) : 0.0f;
            match = v[static_cast<size_t>(y * 4 + x)] == want;
          }
        }
        if (match) {
          shifts.insert({dy, dx});
          found = true;
        }
      }
    }
    ASSERT_TRUE(found) << "seed " << seed;
  }
  EXPECT_EQ(shifts.size(), 25u);
  // Inference is Keras's too: the padded image, resized back (keel's CLI never augments evaluation).
  EXPECT_EQ(pad_crop(img, 0, /*training=*/false).to_vector(), resize(pad_images(img, 2, 2), 4, 4).to_vector());
}

TEST(Preprocessing, RandomTranslationDrawsWithinItsFactorsAndShiftsByThem) {
  HostScope host;
  const RandomTranslation layer(0.25f, Factor(-0.5f, 0.1f));
  const Tensor img = iota(8, 10, 2);
  double sum_dy = 0;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    const ProjectiveTransform t = layer.transformation(8, 10, seed);
    const float dy = -t[5], dx = -t[2];
    ASSERT_GE(dy, -0.25f * 8);
    ASSERT_LE(dy, 0.25f * 8);
    ASSERT_GE(dx, -0.5f * 10);
    ASSERT_LE(dx, 0.1f * 10);
    EXPECT_EQ((ProjectiveTransform{1, 0, t[2], 0, 1, t[5], 0, 0}), t);
    sum_dy += dy;
    if (seed < 20) {
      EXPECT_EQ(layer(img, seed).to_vector(),
                affine_transform(img, {t}, Interpolation::kBilinear, FillMode::kReflect).to_vector());
    }
  }
  EXPECT_NEAR(sum_dy / 400, 0.0, 0.2);  // uniform on [-2, 2): mean 0, sd of the mean 0.06
  EXPECT_EQ(layer(img, 3, /*training=*/false).to_vector(), img.to_vector());
  // A batch: image b draws as that image alone with (seed, b).
  std::vector<float> two = img.to_vector();
  const std::vector<float> second = iota(8, 10, 2, 100).to_vector();
  two.insert(two.end(), second.begin(), second.end());
  const std::vector<float> out = layer(Tensor::from_vector({2, 8, 10, 2}, two), 5).to_vector();
  const std::vector<float> alone = affine_transform(iota(8, 10, 2, 100), {layer.transformation(8, 10, 5, 1)},
                                                    Interpolation::kBilinear, FillMode::kReflect)
                                       .to_vector();
  EXPECT_EQ(std::vector<float>(out.begin() + 160, out.end()), alone);
  EXPECT_THROW(RandomTranslation(1.5f, 0.1f), std::invalid_argument);
}

TEST(Preprocessing, RandomZoomScalesAboutTheCentre) {
  HostScope host;
  const RandomZoom same_aspect(0.3f);
  const RandomZoom independent(0.2f, Factor(-0.5f, -0.4f));
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const ProjectiveTransform t = same_aspect.transformation(9, 7, seed);
    ASSERT_EQ(t[0], t[4]);  // width_factor None: the aspect ratio kept
    ASSERT_GE(t[0], 0.7f);
    ASSERT_LE(t[0], 1.3f);
    // The centre pixel (3, 4) reads itself.
    EXPECT_NEAR(t[0] * 3 + t[2], 3.0f, 1e-5);
    EXPECT_NEAR(t[4] * 4 + t[5], 4.0f, 1e-5);
    const ProjectiveTransform u = independent.transformation(9, 7, seed);
    ASSERT_GE(u[0], 0.5f);
    ASSERT_LE(u[0], 0.6f);
    ASSERT_GE(u[4], 0.8f);
    ASSERT_LE(u[4], 1.2f);
  }
  // Zooming in 2x on a 3 x 3 image about its centre: x' = 0.5 x + 0.5, the centre pixel spreads.
  const Tensor img = Tensor::from_vector({3, 3, 1}, std::vector<float>{0, 0, 0, 0, 4, 0, 0, 0, 0});
  const ProjectiveTransform in2 = {0.5f, 0, 0.5f, 0, 0.5f, 0.5f, 0, 0};
  EXPECT_EQ(affine_transform(img, {in2}, Interpolation::kBilinear, FillMode::kReflect).to_vector(),
            (std::vector<float>{1, 2, 1, 2, 4, 2, 1, 2, 1}));
  const Tensor big = iota(9, 7, 1);
  EXPECT_EQ(same_aspect(big, 11).to_vector(),
            affine_transform(big, {same_aspect.transformation(9, 7, 11)}, Interpolation::kBilinear, FillMode::kReflect)
                .to_vector());
  EXPECT_EQ(same_aspect(big, 11, /*training=*/false).to_vector(), big.to_vector());
  EXPECT_THROW(RandomZoom(-1.5f), std::invalid_argument);
}

// RandomErasing: each erased image differs from its input in exactly the pixels of its box (every
// channel), filled within value_range; the box's sides are sqrt(scale) of the image's and it lies
// inside the image; Keras's default factor erases half the images on average; inference is identity.
TEST(Preprocessing, RandomErasingErasesOneBoxPerImageWithKerasDraws) {
  HostScope host;
  const int64_t n = 2000, h = 20, w = 30, c = 2;
  std::vector<float> v(static_cast<size_t>(n * h * w * c), 5.0f);  // outside [0, 1]: an erased value shows
  const Tensor images = Tensor::from_vector({n, h, w, c}, v);
  const RandomErasing erase(1.0f, {0.04f, 0.25f}, std::nullopt, {0.0f, 1.0f});
  const Tensor out = erase(images, 11);
  int64_t erased_images = 0;
  for (int64_t b = 0; b < n; ++b) {
    const RandomErasing::Box box = erase.box(h, w, 11, b);
    ASSERT_GE(box.x0, 0.0f);
    ASSERT_LE(box.x1, static_cast<float>(w) + 1e-4f);
    ASSERT_GE(box.y0, 0.0f);
    ASSERT_LE(box.y1, static_cast<float>(h) + 1e-4f);
    ASSERT_GE(box.x1 - box.x0, std::sqrt(0.04f) * w - 1e-4f);
    ASSERT_LE(box.x1 - box.x0, std::sqrt(0.25f) * w + 1e-4f);
    ASSERT_GE(box.y1 - box.y0, std::sqrt(0.04f) * h - 1e-4f);
    ASSERT_LE(box.y1 - box.y0, std::sqrt(0.25f) * h + 1e-4f);
    erased_images += box.erase;
    int64_t changed = 0, inside = 0;
    for (int64_t y = 0; y < h; ++y) {
      for (int64_t x = 0; x < w; ++x) {
        const bool in = box.erase && x >= box.x0 && x < box.x1 && y >= box.y0 && y < box.y1;
        inside += in;
        for (int64_t k = 0; k < c; ++k) {
          const float o = out.data()[((b * h + y) * w + x) * c + k];
          if (in) {
            ASSERT_TRUE(o >= 0.0f && o <= 1.0f) << o;
          } else {
            ASSERT_EQ(o, 5.0f) << "image " << b << " (" << y << ", " << x << ")";
          }
          changed += o != 5.0f;
        }
      }
    }
    EXPECT_EQ(changed, inside * c);
  }
  // P(erase) = E[uniform(0, 1)] = 1/2: 1000 of 2000 expected, sd 22.
  EXPECT_NEAR(static_cast<double>(erased_images), 1000.0, 110.0);
  EXPECT_TRUE(erase(images, 11).to_vector() == out.to_vector());  // a function of the seed
  EXPECT_FALSE(erase(images, 12).to_vector() == out.to_vector());
  EXPECT_TRUE(erase(images, 11, /*training=*/false).to_vector() == v);
  // A constant fill, clipped to value_range; factor (1, 1) erases every image.
  const RandomErasing always(Factor(1.0f, 1.0f), {0.1f, 0.1f}, 7.0f, {0.0f, 255.0f});
  const Tensor filled = always(images.slice_rows(0, 50), 3);
  for (int64_t b = 0; b < 50; ++b) {
    const RandomErasing::Box box = always.box(h, w, 3, b);
    ASSERT_TRUE(box.erase);
    const auto y = static_cast<int64_t>(std::ceil(box.y0)), x = static_cast<int64_t>(std::ceil(box.x0));
    EXPECT_EQ(filled.data()[((b * h + y) * w + x) * c], 7.0f);
  }
  EXPECT_THROW(RandomErasing(1.0f, {0.0f, 0.0f}), std::invalid_argument);
  EXPECT_THROW(RandomErasing(1.0f, {0.1f, 0.2f}, std::nullopt, {1.0f, 0.0f}), std::invalid_argument);
}

TEST(Preprocessing, ParseBuildsKerasLayersInOrder) {
  auto names = [](const Augmentation& a) {
    std::vector<std::string> n;
    for (const auto& layer : a.layers()) n.push_back(layer->name());
    return n;
  };
  const Shape shape = {32, 32, 1};
  EXPECT_EQ(names(Augmentation::parse("flip,crop:4", shape, 1)),
            (std::vector<std::string>{"RandomFlip", "ZeroPadding2D", "RandomCrop"}));
  EXPECT_EQ(names(Augmentation::parse("translate:0.1,zoom:0.2:0.1,flip:vertical", shape, 1)),
            (std::vector<std::string>{"RandomTranslation", "RandomZoom", "RandomFlip"}));
  EXPECT_EQ(names(Augmentation::parse("crop:2,erase,erase:0.5:0.1:0.4", shape, 1)),
            (std::vector<std::string>{"ZeroPadding2D", "RandomCrop", "RandomErasing", "RandomErasing"}));
  const Augmentation flip = Augmentation::parse("flip", shape, 1);
  EXPECT_EQ(dynamic_cast<const RandomFlip&>(*flip.layers()[0]).mode(), "horizontal");
  // crop:P keeps the image's size.
  const Augmentation crop = Augmentation::parse("crop:4", {28, 30, 1}, 1);
  Shape s = {28, 30, 1};
  for (const auto& layer : crop.layers()) s = layer->output_shape(s);
  EXPECT_EQ(s, (Shape{28, 30, 1}));
}

TEST(Preprocessing, ParseRefusesBadSpecsNamingTheStep) {
  const Shape shape = {32, 32, 1};
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"", "empty"},
      {"rotate:0.1", "unknown step 'rotate'"},
      {"flip,,crop:4", "an empty step"},
      {"flip,", "an empty step"},
      {"crop", "crop:P"},
      {"crop:x", "'x' is not a whole number"},
      {"crop:0", "outside [1, 32]"},
      {"crop:33", "outside [1, 32]"},
      {"crop:4:4", "crop:P"},
      {"translate:1.5", "outside (0, 1]"},
      {"translate:-0.1", "outside (0, 1]"},
      {"zoom:nan", "outside (0, 1]"},
      {"zoom", "one factor, or two"},
      {"zoom:0.1:0.1:0.1", "one factor, or two"},
      {"flip:sideways", "unknown mode 'sideways'"},
      {"flip:horizontal:vertical", "at most one mode"},
      {"erase:0", "outside (0, 1]"},
      {"erase:0.5:0.1", "erase:F:S0:S1"},
      {"erase:0.5:0.4:0.1", "is not 0 <= S0 <= S1 <= 1"},
      {"erase:0.5:0:1.5", "is not 0 <= S0 <= S1 <= 1"},
      {"erase:1:0:0", "is not 0 <= S0 <= S1 <= 1"},
      {"erase:1:a:0.3", "'a' is not a number"},
  };
  for (const auto& [spec, message] : bad) {
    try {
      Augmentation::parse(spec, shape, 1);
      ADD_FAILURE() << "'" << spec << "' was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), HasSubstr(message)) << spec;
      if (!spec.empty()) {
        EXPECT_THAT(e.what(), HasSubstr("e.g. flip,crop:4")) << spec;
      }
    }
  }
  EXPECT_THROW(Augmentation::parse("flip", {784}, 1), std::invalid_argument);
}

// The pipeline's contract: an element's augmentation depends on (seed, epoch, index) only — not on
// the map's threads — and a restored iterator continues with exactly the same images.
TEST(Preprocessing, KeyedAugmentationIsTheSameUnderAnyThreadCountAndAfterRestore) {
  HostScope host;
  const int64_t n = 64;
  std::vector<float> pixels(static_cast<size_t>(n * 12 * 12));
  Rng rng(3);
  for (float& p : pixels) p = rng.next_float();
  std::vector<float> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = static_cast<float>(i);
  const Dataset examples = Dataset::from_tensor_slices({Tensor::from_vector({n, 12, 12, 1}, pixels), Tensor::from_vector({n}, ids)})
                               .shuffle(n, 9);
  const Augmentation augment = Augmentation::parse("flip,crop:2,translate:0.1,zoom:0.2", {12, 12, 1}, 5);
  auto pipeline = [&](int64_t threads) { return examples.map_with_key(augment.map_function(), threads).batch(8); };
  for (uint64_t epoch : {0u, 1u}) {
    const std::vector<Element> sequential = testing::all(pipeline(0), epoch);
    ASSERT_EQ(sequential.size(), 8u);
    for (int64_t threads : {1, 2, 4, 7}) {
      const std::vector<Element> parallel = testing::all(pipeline(threads), epoch);
      ASSERT_EQ(parallel.size(), sequential.size());
      for (size_t b = 0; b < parallel.size(); ++b) {
        EXPECT_TRUE(testing::bitwise_equal(parallel[b], sequential[b])) << threads << " threads, batch " << b;
      }
    }
    // Resumed after 3 batches, under another thread count: the same remaining batches.
    Iterator first = pipeline(2).make_iterator(epoch);
    testing::drain(first, 3);
    const nlohmann::json state = first.save();
    for (int64_t threads : {0, 3}) {
      Iterator resumed = pipeline(threads).make_iterator(epoch);
      resumed.restore(state);
      const std::vector<Element> rest = testing::drain(resumed);
      ASSERT_EQ(rest.size(), 5u);
      for (size_t b = 0; b < rest.size(); ++b) EXPECT_TRUE(testing::bitwise_equal(rest[b], sequential[b + 3])) << b;
    }
  }
  // The epoch is part of the key: without a shuffle, example i is augmented anew in each epoch.
  const Dataset in_order =
      Dataset::from_tensor_slices({Tensor::from_vector({n, 12, 12, 1}, pixels), Tensor::from_vector({n}, ids)})
          .map_with_key(augment.map_function());
  const std::vector<Element> e0 = testing::all(in_order, 0), e1 = testing::all(in_order, 1);
  ASSERT_EQ(e0.size(), static_cast<size_t>(n));
  int same = 0;
  for (size_t i = 0; i < e0.size(); ++i) same += testing::bitwise_equal(e0[i], e1[i]);
  EXPECT_EQ(same, 0);
}

}  // namespace
}  // namespace keel::preprocessing
