// Image transforms for the input pipeline (host memory, NHWC float32).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "framework/core/tensor.h"

namespace keel {

enum class ResizeMethod {
  kBilinear,  // tf.image.resize(method="bilinear", antialias=False) == torch interpolate(mode="bilinear", align_corners=False)
  kNearest,   // tf.image.resize(method="nearest") == torch interpolate(mode="nearest-exact")
};

// tf.image.resize(images, (height, width), method) without antialias, half-pixel centres.
// images: (H, W, C) or (N, H, W, C); the result has the same rank.
//   bilinear: source coordinate (out + 0.5) * in / out - 0.5, clamped at the borders; interpolated
//             along x on the two source rows, then along y (TF's order).
//   nearest:  source index min(floor((out + 0.5) * (in / out)), in - 1), computed in float as TF does.
Tensor resize(const Tensor& images, int64_t height, int64_t width, ResizeMethod method = ResizeMethod::kBilinear);

// resize(images, height, width, kBilinear) for (N, H, W, C) images only.
Tensor resize_bilinear(const Tensor& images, int64_t height, int64_t width);

// Makes (N, H, W) or (N, H, W, C) images into (N, shape[0], shape[1], shape[2]): resized if the
// size differs, and a single channel repeated when shape[2] > 1 (grayscale to RGB).
Tensor adapt_images(const Tensor& images, const Shape& shape);

// tf.image.crop_to_bounding_box: rows [top, top + height) and columns [left, left + width) of each
// image. std::invalid_argument if the box leaves the image.
Tensor crop_to_bounding_box(const Tensor& images, int64_t top, int64_t left, int64_t height, int64_t width);

// Keras's ZeroPadding2D(padding=(pad_height, pad_width)) on images: pad_height rows of `value` above and
// below, pad_width columns left and right; (H, W, C) -> (H + 2 pad_height, W + 2 pad_width, C).
Tensor pad_images(const Tensor& images, int64_t pad_height, int64_t pad_width, float value = 0.0f);

// keras.ops.image.affine_transform (channels_last). Each row [a0, a1, a2, b0, b1, b2, c0, c1] maps the
// output pixel (x, y) (column, row; pixel centres at integers) to the input point
//   ((a0 x + a1 y + a2) / k, (b0 x + b1 y + b2) / k),  k = c0 x + c1 y + 1,
// which is sampled as map_coordinates does (Keras's NumPy/JAX backends): bilinear from the four
// pixels around it (weights 1 - f and f along each axis), or nearest (the coordinate rounded half away
// from zero); a tap outside the image is moved back in by fill_mode:
//   reflect   (d c b a | a b c d | d c b a)  about the edge of the last pixel
//   wrap      (a b c d | a b c d | a b c d)
//   nearest   (a a a a | a b c d | d d d d)
//   constant  (k k k k | a b c d | k k k k)  k = fill_value
// transforms: one row for all images, or one per image of a (N, H, W, C) batch.
enum class FillMode { kReflect, kWrap, kNearest, kConstant };
enum class Interpolation { kBilinear, kNearest };
using ProjectiveTransform = std::array<float, 8>;
Tensor affine_transform(const Tensor& images, const std::vector<ProjectiveTransform>& transforms,
                        Interpolation interpolation = Interpolation::kBilinear, FillMode fill_mode = FillMode::kConstant,
                        float fill_value = 0.0f);

// Stateless random ops, like tf.image.stateless_random_*: the result depends only on (image, seed), so
// a pipeline resumed from a checkpoint replays them exactly. Seeds draw through framework/core/random.h.

// (H, W, C): mirrored along the width with probability 1/2. (N, H, W, C): each image decides on its
// own (image i draws from counter i of the seed's stream).
Tensor random_flip_left_right(const Tensor& image, uint64_t seed);
// The same along the height (tf.image.stateless_random_flip_up_down), with the same draws.
Tensor random_flip_up_down(const Tensor& image, uint64_t seed);

// (H, W, C) -> (height, width, C) at an offset uniform over every position that fits; (N, H, W, C)
// -> (N, height, width, C), one offset for the whole batch (as tf.image.stateless_random_crop with
// size (N, height, width, C)). std::invalid_argument if the crop is larger than the image.
Tensor random_crop(const Tensor& image, int64_t height, int64_t width, uint64_t seed);

}  // namespace keel
