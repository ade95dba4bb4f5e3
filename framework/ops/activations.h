// The ReLU's backward pass (activations.cc), shared with the fused BatchNormalization + Add + ReLU
// (batch_norm_add_relu.cc), whose output is a ReLU's.
#pragma once

#include "framework/core/tensor.h"

namespace keel::ops::detail {

// dy where y (float32 or bfloat16, the ReLU's stored output) is > 0, else 0: the derivative at 0 is
// taken as 0, as TensorFlow does. Planning (abstract dy or y) returns the unfilled buffer.
Tensor relu_gradient(const Tensor& dy, const Tensor& y);

}  // namespace keel::ops::detail
