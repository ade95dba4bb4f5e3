#include "datasets/image_ops.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/device/context.h"
#include "tests/support/golden.h"

namespace keel {
namespace {

ResizeMethod method_of(const std::string& name) { return name == "nearest" ? ResizeMethod::kNearest : ResizeMethod::kBilinear; }

// Compares a (N, H, W, C) result with torch's golden: all values, or the sampled points of large ones.
void expect_matches_torch(const Tensor& got, const nlohmann::json& want, const std::string& what) {
  if (!want.contains("points")) {
    testing::expect_matches_golden(got, want, what, 1e-5);
    return;
  }
  const std::vector<float> g = got.to_vector();
  int bad = 0;
  for (const auto& p : want.at("points")) {
    const int64_t i = ((p[0].get<int64_t>() * got.dim(1) + p[1].get<int64_t>()) * got.dim(2) + p[2].get<int64_t>()) * got.dim(3) +
                      p[3].get<int64_t>();
    const double w = p[4].get<double>();
    if (!(std::fabs(g[static_cast<size_t>(i)] - w) <= 1e-5 * (1 + std::fabs(w)))) {
      if (++bad <= 3) ADD_FAILURE() << what << " at " << p.dump() << ": keel " << g[static_cast<size_t>(i)];
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

TEST(ImageOps, ResizeMatchesTorchInterpolate) {
  HostScope host;
  const nlohmann::json& doc = testing::load_golden("images/resize.json");
  ASSERT_GE(doc.at("cases").size(), 6u);
  for (const auto& c : doc.at("cases")) {
    const Tensor x = testing::tensor_of(c.at("input"));
    const Shape out_shape = c.at("output_shape").get<Shape>();
    for (const std::string method : {"bilinear", "nearest"}) {
      const std::string what = method + " " + c.at("name").get<std::string>();
      const Tensor y = resize(x, out_shape[1], out_shape[2], method_of(method));
      ASSERT_EQ(y.shape(), out_shape) << what;
      expect_matches_torch(y, c.at(method), what);
      if (x.dim(0) == 1) {
        // (H, W, C) gives the same as a batch of one.
        const Tensor y3 = resize(x.reshape({x.dim(1), x.dim(2), x.dim(3)}), out_shape[1], out_shape[2], method_of(method));
        ASSERT_EQ(y3.shape(), (Shape{out_shape[1], out_shape[2], out_shape[3]})) << what;
        EXPECT_EQ(y3.to_vector(), y.to_vector()) << what;
      }
      if (method == "bilinear") {
        EXPECT_EQ(resize_bilinear(x, out_shape[1], out_shape[2]).to_vector(), y.to_vector()) << what;
      }
    }
  }
}

TEST(ImageOps, ResizeBatchesImagesIndependently) {
  HostScope host;
  std::vector<float> v(3 * 5 * 4 * 2);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * static_cast<float>(i));
  const Tensor batch = Tensor::from_vector({3, 5, 4, 2}, v);
  for (ResizeMethod m : {ResizeMethod::kBilinear, ResizeMethod::kNearest}) {
    const std::vector<float> all = resize(batch, 7, 3, m).to_vector();
    for (int64_t b = 0; b < 3; ++b) {
      const Tensor one = Tensor::from_vector({5, 4, 2}, std::span<const float>(v.data() + b * 40, 40));
      const std::vector<float> single = resize(one, 7, 3, m).to_vector();
      EXPECT_EQ(std::vector<float>(all.begin() + b * 42, all.begin() + (b + 1) * 42), single) << "image " << b;
    }
  }
  EXPECT_THROW(resize(batch, 0, 3), std::invalid_argument);
  EXPECT_THROW(resize(Tensor::zeros({4, 4}), 2, 2), std::invalid_argument);
  EXPECT_THROW(resize_bilinear(Tensor::zeros({4, 4, 1}), 2, 2), std::invalid_argument);
}

Tensor iota_image(int64_t h, int64_t w, int64_t c, float start = 0) {
  std::vector<float> v(static_cast<size_t>(h * w * c));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<float>(i);
  return Tensor::from_vector({h, w, c}, v);
}

TEST(ImageOps, RandomFlipIsStatelessAndMirrors) {
  HostScope host;
  const Tensor img = iota_image(3, 5, 2);
  const std::vector<float> src = img.to_vector();
  std::vector<float> mirrored(src.size());
  for (int64_t y = 0; y < 3; ++y) {
    for (int64_t x = 0; x < 5; ++x) {
      for (int64_t c = 0; c < 2; ++c) mirrored[static_cast<size_t>((y * 5 + x) * 2 + c)] = src[static_cast<size_t>((y * 5 + 4 - x) * 2 + c)];
    }
  }
  int flipped = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const std::vector<float> a = random_flip_left_right(img, seed).to_vector();
    EXPECT_EQ(a, random_flip_left_right(img, seed).to_vector()) << "seed " << seed << " is not deterministic";
    ASSERT_TRUE(a == src || a == mirrored) << "seed " << seed;
    flipped += a == mirrored;
  }
  EXPECT_GT(flipped, 70);  // ~100 of 200 (binomial sd 7)
  EXPECT_LT(flipped, 130);
  // In a batch each image decides independently, still determined by the seed alone.
  std::vector<float> v;
  for (int b = 0; b < 64; ++b) {
    const std::vector<float> one = iota_image(3, 5, 2, 1000.0f * b).to_vector();
    v.insert(v.end(), one.begin(), one.end());
  }
  const Tensor batch = Tensor::from_vector({64, 3, 5, 2}, v);
  const std::vector<float> out = random_flip_left_right(batch, 42).to_vector();
  EXPECT_EQ(out, random_flip_left_right(batch, 42).to_vector());
  int batch_flipped = 0;
  for (int b = 0; b < 64; ++b) batch_flipped += out[static_cast<size_t>(b * 30)] != v[static_cast<size_t>(b * 30)];
  EXPECT_GT(batch_flipped, 10);
  EXPECT_LT(batch_flipped, 54);
}

TEST(ImageOps, RandomCropIsStatelessUniformAndInBounds) {
  HostScope host;
  const int64_t h = 10, w = 9, c = 2, ch = 6, cw = 4;
  const Tensor img = iota_image(h, w, c);
  std::map<std::pair<int64_t, int64_t>, int> counts;
  const int trials = 3000;
  for (int seed = 0; seed < trials; ++seed) {
    const Tensor crop = random_crop(img, ch, cw, static_cast<uint64_t>(seed));
    ASSERT_EQ(crop.shape(), (Shape{ch, cw, c}));
    const std::vector<float> v = crop.to_vector();
    EXPECT_EQ(v, random_crop(img, ch, cw, static_cast<uint64_t>(seed)).to_vector());
    const int64_t top = static_cast<int64_t>(v[0]) / c / w, left = static_cast<int64_t>(v[0]) / c % w;
    ASSERT_LE(top + ch, h);
    ASSERT_LE(left + cw, w);
    // The crop is the window at (top, left).
    for (int64_t y = 0; y < ch; ++y) {
      for (int64_t x = 0; x < cw; ++x) {
        ASSERT_EQ(v[static_cast<size_t>((y * cw + x) * c + 1)], static_cast<float>(((top + y) * w + left + x) * c + 1));
      }
    }
    ++counts[{top, left}];
  }
  // Every one of the 5 x 6 positions, each near 3000 / 30 = 100 (sd ~10).
  ASSERT_EQ(counts.size(), static_cast<size_t>((h - ch + 1) * (w - cw + 1)));
  for (const auto& [pos, n] : counts) {
    EXPECT_GT(n, 55) << pos.first << "," << pos.second;
    EXPECT_LT(n, 150) << pos.first << "," << pos.second;
  }
  // A batch is cropped at one offset; a full-size crop is the image; too large is an error.
  std::vector<float> two = img.to_vector();
  const std::vector<float> second = iota_image(h, w, c, 500).to_vector();
  two.insert(two.end(), second.begin(), second.end());
  const std::vector<float> bc = random_crop(Tensor::from_vector({2, h, w, c}, two), ch, cw, 5).to_vector();
  const std::vector<float> single = random_crop(img, ch, cw, 5).to_vector();
  ASSERT_EQ(bc.size(), 2 * single.size());
  EXPECT_EQ(std::vector<float>(bc.begin(), bc.begin() + static_cast<int64_t>(single.size())), single);
  EXPECT_EQ(bc[single.size()], single[0] + 500);
  EXPECT_EQ(random_crop(img, h, w, 9).to_vector(), img.to_vector());
  EXPECT_THROW(random_crop(img, h + 1, w, 0), std::invalid_argument);
}

TEST(ImageOps, RandomFlipUpDownMirrorsRowsWithTheLeftRightDraws) {
  HostScope host;
  const Tensor img = iota_image(4, 3, 2);
  const std::vector<float> src = img.to_vector();
  std::vector<float> mirrored(src.size());
  for (int64_t y = 0; y < 4; ++y) {
    for (int64_t j = 0; j < 3 * 2; ++j) mirrored[static_cast<size_t>(y * 6 + j)] = src[static_cast<size_t>((3 - y) * 6 + j)];
  }
  int flipped = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const std::vector<float> a = random_flip_up_down(img, seed).to_vector();
    ASSERT_TRUE(a == src || a == mirrored) << "seed " << seed;
    // The same decision as random_flip_left_right with this seed.
    EXPECT_EQ(a == mirrored, random_flip_left_right(img, seed).to_vector() != src) << "seed " << seed;
    flipped += a == mirrored;
  }
  EXPECT_GT(flipped, 70);
  EXPECT_LT(flipped, 130);
}

TEST(ImageOps, PadImagesAndCropToBoundingBoxAreExact) {
  HostScope host;
  const Tensor img = Tensor::from_vector({2, 2, 1}, std::vector<float>{1, 2, 3, 4});
  EXPECT_EQ(pad_images(img, 1, 2).to_vector(), (std::vector<float>{0, 0, 0, 0, 0, 0,  //
                                                                     0, 0, 1, 2, 0, 0,  //
                                                                     0, 0, 3, 4, 0, 0,  //
                                                                     0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(pad_images(img, 1, 2).shape(), (Shape{4, 6, 1}));
  EXPECT_EQ(pad_images(img, 0, 0).to_vector(), img.to_vector());
  const Tensor big = iota_image(5, 4, 2);
  const Tensor box = crop_to_bounding_box(big, 1, 2, 3, 2);
  ASSERT_EQ(box.shape(), (Shape{3, 2, 2}));
  const std::vector<float> v = box.to_vector();
  for (int64_t y = 0; y < 3; ++y) {
    for (int64_t x = 0; x < 2; ++x) {
      for (int64_t c = 0; c < 2; ++c) {
        EXPECT_EQ(v[static_cast<size_t>((y * 2 + x) * 2 + c)], static_cast<float>(((1 + y) * 4 + 2 + x) * 2 + c));
      }
    }
  }
  EXPECT_THROW(crop_to_bounding_box(big, 3, 0, 3, 2), std::invalid_argument);
  EXPECT_THROW(crop_to_bounding_box(big, 0, -1, 1, 1), std::invalid_argument);
  EXPECT_THROW(pad_images(big, -1, 0), std::invalid_argument);
}

FillMode fill_mode_of(const std::string& name) {
  if (name == "reflect") return FillMode::kReflect;
  if (name == "nearest") return FillMode::kNearest;
  return FillMode::kConstant;
}

// bench/golden_affine.py: torch's grid_sample (align_corners=False) in float64, cross-checked there
// against a per-pixel loop; translations, zooms, rotation+shear and a projective map, on 5x7x2, 8x8x1
// and 32x32x1 images, in each fill mode torch has.
TEST(ImageOps, AffineTransformMatchesTorchGridSample) {
  HostScope host;
  const nlohmann::json& golden = testing::load_golden("affine_transform.json");
  ASSERT_GE(golden.at("cases").size(), 40u);
  for (const auto& c : golden.at("cases")) {
    const std::vector<float> t = c.at("transform").get<std::vector<float>>();
    ProjectiveTransform transform;
    std::copy(t.begin(), t.end(), transform.begin());
    const Tensor image = testing::tensor_of(golden.at("images").at(c.at("image").get<std::string>()));
    const Tensor got = affine_transform(image, {transform}, Interpolation::kBilinear,
                                        fill_mode_of(c.at("fill_mode").get<std::string>()));
    testing::expect_matches_golden(got, c.at("output"), c.at("name").get<std::string>(), 1e-5);
  }
}

// Whole-pixel shifts of a 1 x 4 row [a b c d] = [1 2 3 4], read by hand off Keras's fill-mode table.
TEST(ImageOps, AffineTransformFillModesByHand) {
  HostScope host;
  const Tensor row = Tensor::from_vector({1, 4, 1}, std::vector<float>{1, 2, 3, 4});
  auto shifted = [&](float dx, FillMode mode, Interpolation interpolation = Interpolation::kBilinear) {
    // Output x reads input x - dx: the image moves right by dx.
    return affine_transform(row, {{1, 0, -dx, 0, 1, 0, 0, 0}}, interpolation, mode, 9.0f).to_vector();
  };
  EXPECT_EQ(shifted(2, FillMode::kReflect), (std::vector<float>{2, 1, 1, 2}));   // (b a | a b c d)
  EXPECT_EQ(shifted(-3, FillMode::kReflect), (std::vector<float>{4, 4, 3, 2}));  // (a b c d | d c b)
  EXPECT_EQ(shifted(-6, FillMode::kReflect), (std::vector<float>{2, 1, 1, 2}));  // reads x + 6: (d c b a | a b c d) at 4..11
  EXPECT_EQ(shifted(2, FillMode::kWrap), (std::vector<float>{3, 4, 1, 2}));
  EXPECT_EQ(shifted(-5, FillMode::kWrap), (std::vector<float>{2, 3, 4, 1}));
  EXPECT_EQ(shifted(2, FillMode::kNearest), (std::vector<float>{1, 1, 1, 2}));
  EXPECT_EQ(shifted(2, FillMode::kConstant), (std::vector<float>{9, 9, 1, 2}));
  EXPECT_EQ(shifted(0, FillMode::kConstant), (std::vector<float>{1, 2, 3, 4}));
  // Half a pixel: bilinear averages neighbours; a tap outside takes the fill value (constant) or its
  // reflection.
  EXPECT_EQ(shifted(0.5f, FillMode::kConstant), (std::vector<float>{5, 1.5f, 2.5f, 3.5f}));
  EXPECT_EQ(shifted(0.5f, FillMode::kReflect), (std::vector<float>{1, 1.5f, 2.5f, 3.5f}));
  EXPECT_EQ(shifted(-0.5f, FillMode::kWrap), (std::vector<float>{1.5f, 2.5f, 3.5f, 2.5f}));
  // Nearest rounds the point half away from zero: x - 0.5 -> x for x >= 1, and -0.5 -> -1 (outside).
  EXPECT_EQ(shifted(0.5f, FillMode::kConstant, Interpolation::kNearest), (std::vector<float>{9, 2, 3, 4}));
  EXPECT_EQ(shifted(0.4f, FillMode::kConstant, Interpolation::kNearest), (std::vector<float>{1, 2, 3, 4}));
  // One transform per image of a batch, or one for all; anything else is refused.
  const Tensor two = Tensor::from_vector({2, 1, 4, 1}, std::vector<float>{1, 2, 3, 4, 1, 2, 3, 4});
  EXPECT_EQ(affine_transform(two, {{1, 0, -1, 0, 1, 0, 0, 0}, {1, 0, 1, 0, 1, 0, 0, 0}}, Interpolation::kBilinear,
                             FillMode::kConstant)
                .to_vector(),
            (std::vector<float>{0, 1, 2, 3, 2, 3, 4, 0}));
  EXPECT_THROW(affine_transform(two, {{}, {}, {}}), std::invalid_argument);
}

}  // namespace
}  // namespace keel
