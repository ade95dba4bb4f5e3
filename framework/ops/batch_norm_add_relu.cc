// BatchNormalization, Add and ReLU as one op: a ResNet block's end (see batch_norm.h). The forward
// pass normalises, adds the residual and clamps in one pass over x (batch_norm.cc's kernels); the
// backward pass masks dy where the saved output is 0, which is the residual's gradient, and runs
// BatchNormalization's backward pass on it.
#include <stdexcept>
#include <string>
#include <vector>

#include "framework/autodiff/tape.h"
#include "framework/ops/activations.h"
#include "framework/ops/batch_norm.h"
#include "framework/ops/batch_norm_internal.h"
#include "framework/ops/op_util.h"

namespace keel::ops {
namespace {

// The channel count, after checking x (..., C) against the (C,) parameters and the residual.
int64_t check_add_relu(const std::string& op, const Tensor& x, const Tensor& residual,
                       std::initializer_list<const Tensor*> params) {
  if (!x.defined() || x.rank() < 2) detail::shape_error(op, "x must have a batch axis and a channels axis");
  const int64_t channels = x.dim(-1);
  for (const Tensor* t : params) {
    if (!t->defined() || t->rank() != 1 || t->dim(0) != channels) {
      detail::shape_error(op, "parameters and statistics must have shape (" + std::to_string(channels) + ",) for x " +
                                  shape_string(x.shape()));
    }
  }
  if (!residual.defined() || residual.shape() != x.shape() || residual.dtype() != compute_dtype()) {
    detail::shape_error(op, "the residual must have x's shape " + shape_string(x.shape()) + " and the compute dtype");
  }
  return channels;
}

// Records y's backward pass: the masked dy is the residual's gradient and BatchNormalization's dy
// (bn_grads: its backward pass on that dy, for x, gamma and beta).
template <typename BnGrads>
void record_add_relu(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& residual, const Tensor& y,
                     BnGrads bn_grads) {
  GradientTape::record({x, gamma, beta, residual}, {y}, [y, bn_grads](const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
    const Tensor g = detail::relu_gradient(dy[0], y);
    std::vector<Tensor> grads = bn_grads(std::vector<Tensor>{g}, std::vector<bool>{needs[0], needs[1], needs[2]});
    grads.push_back(needs[3] ? g : Tensor());
    return grads;
  });
}

}  // namespace

BatchNormResult batch_norm_add_relu_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                             const Tensor& residual, float epsilon) {
  const int64_t channels = check_add_relu("batch_norm_add_relu_training", x, residual, {&gamma, &beta});
  const DType dt = compute_dtype();
  BatchNormResult out{Tensor::empty(x.shape(), dt), Tensor::empty({channels}), Tensor::empty({channels})};
  if (!out.mean.is_abstract() && !x.is_abstract()) {
    detail::batch_norm_moments(x, out.mean, out.variance);
    if (detail::compute(out.y, {&x, &gamma, &beta, &residual})) {
      detail::batch_norm_add_relu(x, out.mean, out.variance, gamma, beta, epsilon, residual, out.y);
    }
  }
  if (GradientTape::is_recording({&x, &gamma, &beta, &residual})) {
    detail::BatchNormSaved s;
    s.x = x, s.gamma = gamma, s.mean = out.mean, s.variance = out.variance;
    s.x_shape = x.shape(), s.rows = channels == 0 ? 0 : x.size() / channels, s.channels = channels, s.epsilon = epsilon;
    s.bfloat16_output = dt == DType::bfloat16;
    s.is_variable = {x.is_trainable_variable(), gamma.is_trainable_variable(), beta.is_trainable_variable()};
    s.placement = {0, detail::placement_key(gamma), detail::placement_key(beta)};
    record_add_relu(x, gamma, beta, residual, out.y, [s](const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
      return detail::batch_norm_training_grads(dy, needs, s);
    });
  }
  return out;
}

Tensor batch_norm_add_relu_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& residual,
                                     const Tensor& moving_mean, const Tensor& moving_variance, float epsilon) {
  check_add_relu("batch_norm_add_relu_inference", x, residual, {&gamma, &beta, &moving_mean, &moving_variance});
  const DType dt = compute_dtype();
  Tensor y = Tensor::empty(x.shape(), dt);
  if (detail::compute(y, {&x, &gamma, &beta, &residual, &moving_mean, &moving_variance})) {
    detail::batch_norm_add_relu(x, moving_mean, moving_variance, gamma, beta, epsilon, residual, y);
  }
  if (GradientTape::is_recording({&x, &gamma, &beta, &residual})) {
    const Tensor saved_x = GradientTape::is_recording({&gamma}) ? x : Tensor();
    const std::array<bool, 3> is_variable = {x.is_trainable_variable(), gamma.is_trainable_variable(),
                                             beta.is_trainable_variable()};
    record_add_relu(x, gamma, beta, residual, y, [=](const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
      return detail::batch_norm_inference_grads(dy, needs, saved_x, gamma, beta, moving_mean, moving_variance, epsilon,
                                                /*relu=*/false, dt == DType::bfloat16, is_variable);
    });
  }
  return y;
}

}  // namespace keel::ops
