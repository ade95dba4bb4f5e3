// Keras's image augmentation layers (keras.layers.RandomFlip, RandomCrop, RandomTranslation,
// RandomZoom) for the input pipeline: host images (H, W, C) or (N, H, W, C), float32, NHWC.
//
// They run where Keras users put them with tf.data, in a dataset map before batching — outside the
// model, so outside any replica — and, unlike Keras's stateful SeedGenerator, every draw is a pure
// function of a seed: Augmentation keys each element by (seed, epoch, element index)
// (Dataset::map_with_key), so the images a run trains on do not depend on the number of pipeline
// threads, and a resumed run sees exactly the images an uninterrupted one would.
//
//   Augmentation augment({std::make_shared<RandomFlip>("horizontal"),
//                         std::make_shared<ZeroPadding2D>(4, 4), std::make_shared<RandomCrop>(32, 32)}, seed);
//   Dataset train = Dataset::from_tensor_slices({images, labels})       // images (N, 32, 32, 1)
//                       .shuffle(60000, seed)
//                       .map_with_key(augment.map_function(), AUTOTUNE)  // component 0 augmented
//                       .batch(256, /*drop_remainder=*/true);
//
// Keras's semantics, defaults and argument checks (keras/src/layers/preprocessing/image_preprocessing);
// training = false is each layer's inference behaviour (identity, or RandomCrop's centre crop).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "datasets/image_ops.h"
#include "framework/core/tensor.h"
#include "framework/data/dataset.h"

namespace keel::preprocessing {

class ImageLayer {
 public:
  virtual ~ImageLayer() = default;
  // training: the layer's random transform drawn from `seed` alone (same seed, same output); image b
  // of a batch draws from (seed, b), except RandomCrop, which crops a whole batch at one place as
  // Keras does. std::invalid_argument for a tensor that is not (H, W, C) or (N, H, W, C).
  virtual Tensor operator()(const Tensor& images, uint64_t seed, bool training = true) const = 0;
  // The image shape (H, W, C) it returns for `input` (H, W, C).
  virtual Shape output_shape(const Shape& input) const { return input; }
  virtual std::string name() const = 0;  // Keras's class name
};

// keras.layers.RandomFlip(mode): "horizontal" (left-right), "vertical" (up-down) or
// "horizontal_and_vertical" (Keras's default; each decided on its own), each with probability 1/2.
class RandomFlip final : public ImageLayer {
 public:
  explicit RandomFlip(std::string mode = "horizontal_and_vertical");
  Tensor operator()(const Tensor& images, uint64_t seed, bool training = true) const override;
  std::string name() const override { return "RandomFlip"; }
  const std::string& mode() const { return mode_; }

 private:
  std::string mode_;
};

// keras.layers.RandomCrop(height, width). Training, when the image is larger than (height, width)
// along both axes: a crop at an offset uniform over every position that fits (random_crop; one
// offset per batch, as Keras). Inference, or an image not larger along both: the largest centred
// window of the target's aspect ratio, resized (bilinear) to (height, width) — identity when the
// image already has that size (Keras 2 and Keras 3's documentation; after ZeroPadding2D it shrinks
// the padded image, as in Keras, which is why keel never augments evaluation data).
class RandomCrop final : public ImageLayer {
 public:
  RandomCrop(int64_t height, int64_t width);
  Tensor operator()(const Tensor& images, uint64_t seed, bool training = true) const override;
  Shape output_shape(const Shape& input) const override;
  std::string name() const override { return "RandomCrop"; }

 private:
  int64_t height_, width_;
};

// keras.layers.ZeroPadding2D(padding=(pad_height, pad_width)) as a pipeline step, the same in
// training and inference; before RandomCrop it makes torchvision's RandomCrop(size, padding).
class ZeroPadding2D final : public ImageLayer {
 public:
  ZeroPadding2D(int64_t pad_height, int64_t pad_width);
  Tensor operator()(const Tensor& images, uint64_t seed, bool training = true) const override;
  Shape output_shape(const Shape& input) const override;
  std::string name() const override { return "ZeroPadding2D"; }

 private:
  int64_t pad_height_, pad_width_;
};

// A Keras factor: a float f means [-|f|, |f|]; a pair, its bounds in either order. Every bound in
// [-1, 1] (std::invalid_argument otherwise, naming `what`).
struct Factor {
  float lower = 0.0f, upper = 0.0f;
  Factor(float f);  // NOLINT(google-explicit-constructor): Keras passes a bare float
  Factor(float a, float b);
};

// keras.layers.RandomTranslation(height_factor, width_factor, fill_mode="reflect",
// interpolation="bilinear", fill_value=0): each image shifted by dy = u * H rows and dx = v * W
// columns, u uniform in height_factor's bounds and v in width_factor's (positive: down, right), through
// affine_transform with [1, 0, -dx, 0, 1, -dy, 0, 0]. Inference: identity.
class RandomTranslation final : public ImageLayer {
 public:
  RandomTranslation(Factor height_factor, Factor width_factor, FillMode fill_mode = FillMode::kReflect,
                    Interpolation interpolation = Interpolation::kBilinear, float fill_value = 0.0f);
  Tensor operator()(const Tensor& images, uint64_t seed, bool training = true) const override;
  std::string name() const override { return "RandomTranslation"; }
  // The transform image b of an (h, w) batch gets from `seed` (what operator() applies).
  ProjectiveTransform transformation(int64_t h, int64_t w, uint64_t seed, int64_t b = 0) const;

 private:
  Factor height_, width_;
  FillMode fill_mode_;
  Interpolation interpolation_;
  float fill_value_;
};

// keras.layers.RandomZoom(height_factor, width_factor=None, fill_mode="reflect",
// interpolation="bilinear", fill_value=0): zooms zy uniform in [1 + lower, 1 + upper] of
// height_factor and zx likewise of width_factor (without one, zx = zy: the aspect ratio kept); a
// zoom above 1 zooms out. Through affine_transform with [zx, 0, (W-1)/2 (1-zx), 0, zy, (H-1)/2 (1-zy),
// 0, 0], about the image's centre. Inference: identity.
class RandomZoom final : public ImageLayer {
 public:
  explicit RandomZoom(Factor height_factor, std::optional<Factor> width_factor = std::nullopt,
                      FillMode fill_mode = FillMode::kReflect, Interpolation interpolation = Interpolation::kBilinear,
                      float fill_value = 0.0f);
  Tensor operator()(const Tensor& images, uint64_t seed, bool training = true) const override;
  std::string name() const override { return "RandomZoom"; }
  ProjectiveTransform transformation(int64_t h, int64_t w, uint64_t seed, int64_t b = 0) const;

 private:
  Factor height_;
  std::optional<Factor> width_;
  FillMode fill_mode_;
  Interpolation interpolation_;
  float fill_value_;
};

// keras.layers.RandomErasing(factor=1.0, scale=(0.02, 0.33), fill_value=None, value_range=(0, 255))
// (Zhong et al., "Random Erasing Data Augmentation"): each image is erased with a probability drawn
// uniform in factor's bounds (a bare f: [0, f], so Keras's default 1.0 erases half the images on
// average). The erased box is sqrt(a) W wide and sqrt(b) H high, a and b uniform in scale (so its area,
// sqrt(ab) of the image's, lies in scale's range), at a uniform position; its pixels (every
// channel) become fill_value, or, without one, standard normal draws times value_range's upper bound,
// each clipped to value_range — Keras's. A pixel (y, x) is in the box when x0 <= x < x1 and
// y0 <= y < y1 for the box's real-valued corners, as Keras's mask. Inference: identity.
class RandomErasing final : public ImageLayer {
 public:
  struct Range {
    float lower, upper;
  };
  explicit RandomErasing(Factor factor = 1.0f, Range scale = {0.02f, 0.33f}, std::optional<float> fill_value = std::nullopt,
                         Range value_range = {0.0f, 255.0f});
  Tensor operator()(const Tensor& images, uint64_t seed, bool training = true) const override;
  std::string name() const override { return "RandomErasing"; }

  struct Box {
    bool erase = false;
    float x0 = 0, x1 = 0, y0 = 0, y1 = 0;  // [x0, x1) x [y0, y1), in pixels
  };
  // What image b of an (h, w) batch gets from `seed` (what operator() applies).
  Box box(int64_t h, int64_t w, uint64_t seed, int64_t b = 0) const;

 private:
  Range factor_, scale_;
  std::optional<float> fill_value_;
  Range value_range_;
};

// Layers applied in order (keras.Sequential of preprocessing layers), keyed for the pipeline.
class Augmentation {
 public:
  Augmentation(std::vector<std::shared_ptr<const ImageLayer>> layers, uint64_t seed);

  // The CLI's --augment grammar: comma-separated steps, applied in order, for images of
  // `image_shape` (H, W, C):
  //   flip[:horizontal|vertical|horizontal_and_vertical]  RandomFlip (bare "flip": horizontal)
  //   crop:P          ZeroPadding2D(P) then RandomCrop(H, W): pad P pixels of 0, crop back at random
  //   translate:F     RandomTranslation(F, F);   translate:FH:FW  RandomTranslation(FH, FW)
  //   zoom:F          RandomZoom(F) (aspect kept); zoom:FH:FW      RandomZoom(FH, FW)
  //   erase[:F[:S0:S1]]  RandomErasing(F (default 1.0), scale=(S0, S1) (default 0.02, 0.33)), random fill
  // with P an integer in [1, min(H, W)], F a number in (0, 1] and 0 <= S0 <= S1 <= 1, S1 > 0.
  // std::invalid_argument names the step and the grammar. `value_range` is the images' (RandomErasing's
  // value_range; keel's pipelines scale pixels to [0, 1]).
  static Augmentation parse(const std::string& spec, const Shape& image_shape, uint64_t seed,
                            RandomErasing::Range value_range = {0.0f, 1.0f});

  // Every layer in order; layer i draws from combine_keys(seed, i).
  Tensor operator()(const Tensor& images, uint64_t seed, bool training = true) const;
  // For map_with_key: component 0 (the image) through the layers with the element's seed, the
  // other components unchanged.
  Element operator()(const Element& element, const ElementKey& key) const;
  KeyedMapFunction map_function() const;
  // The seed of one element: (this augmentation's seed, epoch, index within the epoch).
  uint64_t element_seed(const ElementKey& key) const;

  const std::vector<std::shared_ptr<const ImageLayer>>& layers() const { return layers_; }

 private:
  std::vector<std::shared_ptr<const ImageLayer>> layers_;
  uint64_t seed_;
};

}  // namespace keel::preprocessing
