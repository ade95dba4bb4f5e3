// Pooling on NHWC images with TensorFlow's semantics (tf.nn.max_pool2d, tf.nn.avg_pool2d, Keras's
// GlobalAveragePooling2D). Same op contract as ops.h; Padding and the window rule are in conv.h.
#pragma once

#include <array>

#include "framework/core/tensor.h"
#include "framework/ops/conv.h"

namespace keel::ops {

// Shape rule of max_pool2d / avg_pool2d: (N, H, W, C) -> (N, OH, OW, C), OH and OW by conv.h's
// window rule with the pool as the window (no dilation). -1 (unknown) dims stay -1. Throws
// std::invalid_argument on anything the pooling ops would reject.
Shape pool2d_output_shape(const Shape& x, std::array<int, 2> pool, std::array<int, 2> strides, Padding padding);

// Max over each pool {height, width} window, moved by strides {height, width}. Under SAME padding
// the padded positions are ignored (never the max), as in TensorFlow; every window holds at least
// one input position. x (N, H, W, C) -> (N, OH, OW, C).
// Backward routes each output's gradient to the first position (in row-major window order) holding
// the window's max, as TensorFlow does on ties; overlapping windows add.
// Saves, when a tape records, the offset of each maximum within its window (a tensor of y's size; the
// first max on ties), not x: a pool usually reads a padded copy (ResNet's pool1_pad) that nothing
// else keeps, and saving it cost 4x more than the offsets. Throws std::invalid_argument on rank != 4,
// pool/stride < 1, or a VALID window larger than the input.
Tensor max_pool2d(const Tensor& x, std::array<int, 2> pool, std::array<int, 2> strides, Padding padding);

// Mean over each window. Under SAME padding each output divides by the number of *valid* (in-input)
// positions in its window, as TensorFlow does. x (N, H, W, C) -> (N, OH, OW, C).
// Saves nothing (backward spreads dy / count over each window). Errors as max_pool2d.
Tensor avg_pool2d(const Tensor& x, std::array<int, 2> pool, std::array<int, 2> strides, Padding padding);

// Mean over H and W: x (N, H, W, C) -> (N, C). Saves nothing. Throws std::invalid_argument on rank != 4
// or H * W == 0.
Tensor global_avg_pool2d(const Tensor& x);

}  // namespace keel::ops
