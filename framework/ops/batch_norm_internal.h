// Pieces of batch_norm.cc that the fused BatchNormalization + Add + ReLU ops
// (batch_norm_add_relu.cc) share: the statistics, the fused forward pass and the backward passes.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "framework/core/tensor.h"

namespace keel::ops::detail {

// What batch_norm_training's backward pass keeps (x, gamma and the statistics only where a gradient
// or a fused ReLU's mask needs them; beta only for the mask).
struct BatchNormSaved {
  Tensor x, gamma, beta, mean, variance;
  Shape x_shape;
  int64_t rows = 0, channels = 0;
  float epsilon = 0;
  bool relu = false, bfloat16_output = false;
  std::array<bool, 3> is_variable{};
  std::array<uint64_t, 3> placement{};  // detail::placement_key of x, gamma, beta
};

// The gradients for x, gamma and beta from dy (needs: which), as batch_norm_training's backward pass.
std::vector<Tensor> batch_norm_training_grads(const std::vector<Tensor>& dy, const std::vector<bool>& needs,
                                              const BatchNormSaved& s);
// The same for batch_norm_inference (saved_x: x where a gradient or the mask needs it).
std::vector<Tensor> batch_norm_inference_grads(const std::vector<Tensor>& dy, const std::vector<bool>& needs,
                                               const Tensor& saved_x, const Tensor& gamma, const Tensor& beta,
                                               const Tensor& moving_mean, const Tensor& moving_variance, float epsilon,
                                               bool relu, bool bfloat16_output, const std::array<bool, 3>& is_variable);

// x's per-channel mean and biased variance into the (C,) mean and variance (real tensors).
void batch_norm_moments(const Tensor& x, Tensor& mean, Tensor& variance);
// y = max(bn(x) + residual, 0) with the given statistics: residual and y of the same dtype, each sum
// rounded to it as the Add would (real tensors).
void batch_norm_add_relu(const Tensor& x, const Tensor& mean, const Tensor& variance, const Tensor& gamma,
                         const Tensor& beta, float epsilon, const Tensor& residual, Tensor& y);

}  // namespace keel::ops::detail
