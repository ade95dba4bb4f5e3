// Concatenation along one axis (tf.concat / keras.layers.Concatenate).
#pragma once

#include <vector>

#include "framework/core/tensor.h"

namespace keel::ops {

// Joins `xs` along `axis` (negative counts from the end: -1 is the last, the channels of NHWC).
// Every input has the same rank and the same dims off `axis`; the output's `axis` dim is their sum.
// Always a new tensor, even for one input. Differentiable w.r.t. every input; saves nothing but the
// inputs' shapes: backward copies each input's slice of dy into its own buffer.
Tensor concat(const std::vector<Tensor>& xs, int axis);

}  // namespace keel::ops
