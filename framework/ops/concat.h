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
// concat's shape rule (used by the op, Keras's Concatenate layer and the planner alike). Throws
// std::invalid_argument on no inputs, scalars, an axis out of range or shapes that differ off `axis`.
Shape concat_output_shape(const std::vector<Shape>& shapes, int axis);

}  // namespace keel::ops
