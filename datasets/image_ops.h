// Image transforms for the input pipeline (host memory, NHWC float32).
#pragma once

#include <cstdint>

#include "framework/core/tensor.h"

namespace keel {

// tf.image.resize(images, (height, width), method="bilinear", antialias=False): half-pixel centres,
// source coordinate (out + 0.5) * in / out - 0.5, clamped at the borders. images: (N, H, W, C).
Tensor resize_bilinear(const Tensor& images, int64_t height, int64_t width);

// Makes (N, H, W) or (N, H, W, C) images into (N, shape[0], shape[1], shape[2]): resized if the
// size differs, and a single channel repeated when shape[2] > 1 (grayscale to RGB).
Tensor adapt_images(const Tensor& images, const Shape& shape);

}  // namespace keel
