// Batch normalisation over the channels axis, which is the last one: (N, C) or NHWC (N, H, W, C).
// Statistics are taken per channel over every other axis (count = x.size() / C elements each).
//
// Both ops are differentiable w.r.t. x, gamma and beta (gamma, beta: (C,)). Per-channel sums are
// accumulated in double; the elementwise work runs over contiguous rows of C channels.
#pragma once

#include "framework/core/tensor.h"

namespace keel::ops {

struct BatchNormResult {
  Tensor y;         // x's shape
  Tensor mean;      // (C,) batch mean
  Tensor variance;  // (C,) *biased* batch variance: sum((x - mean)^2) / count
};

// Training mode, as TensorFlow's fused batch norm with is_training=True:
//   y = gamma * (x - mean) / sqrt(variance + epsilon) + beta
// with the batch's own mean and biased variance, both returned. They are what Keras feeds its moving
// averages: Keras removes the Bessel correction that FusedBatchNorm applies to its variance output
// (`_maybe_add_or_remove_bessels_correction`), so moving_variance follows the biased variance.
// `mean` and `variance` are not differentiable (TensorFlow's FusedBatchNormGrad ignores their
// gradients too): only y is recorded on the tape.
// An empty batch (count 0) gives mean = variance = 0 and an empty y.
//
// Saved for backward: x, gamma, and the returned mean and variance — all shared handles, so the op
// saves no buffer of its own (x̂ would be a new x-sized buffer). Backward recomputes
// inv_std = 1/sqrt(variance + epsilon) and x̂ = (x - mean) * inv_std per element:
//   dbeta  = sum(dy)                 dgamma = sum(dy * x̂)
//   dx     = gamma * inv_std * (dy - dbeta / count - x̂ * dgamma / count)
// Nothing is saved when only beta is differentiated. Do not modify the returned mean/variance
// before the backward pass has run.
//
// relu = true fuses the ReLU that follows (Keras's BatchNormalization then Activation("relu")):
// y = max(bn(x), 0) in the same pass, with the bits of the two ops one after the other, and a
// backward pass that recomputes where y > 0 from x (saved in any case) instead of reading y.
BatchNormResult batch_norm_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, float epsilon,
                                    bool relu = false);

// Inference mode: the same formula with the given statistics, which are constants (no gradient
// flows to them; they are not recorded as inputs). Saved for backward: gamma, moving_mean and
// moving_variance (shared handles), and x only when gamma is being differentiated.
//   dx = dy * gamma * inv_std     dgamma = sum(dy * (x - moving_mean) * inv_std)     dbeta = sum(dy)
// relu as for batch_norm_training (x is then saved for the mask).
Tensor batch_norm_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& moving_mean,
                            const Tensor& moving_variance, float epsilon, bool relu = false);

// BatchNormalization, then Add with `residual`, then ReLU — a ResNet block's end — as one op
// (batch_norm_add_relu.cc): y = max(bn(x) + residual, 0), with the bits of the three layers one after
// the other (the normalised value rounded to y's dtype before the sum, as the Add reads it). residual
// has x's shape and the compute dtype, as the Add's inputs do. Backward: dy where y > 0 (y saved: the
// next layer keeps it anyway) is the residual's gradient, and BatchNormalization's backward runs on it.
BatchNormResult batch_norm_add_relu_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                             const Tensor& residual, float epsilon);
Tensor batch_norm_add_relu_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& residual,
                                     const Tensor& moving_mean, const Tensor& moving_variance, float epsilon);

}  // namespace keel::ops
