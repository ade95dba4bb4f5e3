// Elementwise ops and reshapes: bias_add, add, scale, reshape.
#include "framework/autodiff/tape.h"
#include "framework/ops/op_util.h"
#include "framework/ops/ops.h"

namespace keel::ops {

Tensor bias_add(const Tensor& x, const Tensor& bias) {
  if (bias.rank() != 1 || x.rank() < 1 || x.dim(-1) != bias.dim(0)) {
    detail::shape_error("bias_add", "bias " + shape_string(bias.shape()) + " does not match input " +
                                        shape_string(x.shape()));
  }
  const int64_t channels = bias.dim(0);
  Tensor y = Tensor::empty(x.shape());
  if (detail::compute(y, {&x, &bias}) && channels > 0) {
    // Rows of C channels: works for (N, C) and NHWC alike.
    ConstMatrixMap xm(x.data(), x.size() / channels, channels);
    MatrixMap ym(y.data(), x.size() / channels, channels);
    ym.noalias() = xm.rowwise() + Eigen::Map<const Eigen::RowVectorXf>(bias.data(), channels);
  }
  if (GradientTape::is_recording({&x, &bias})) {
    const Shape bias_shape = bias.shape();
    const bool bias_is_variable = bias.is_trainable_variable();
    GradientTape::record({x, bias}, {y}, [bias_shape, bias_is_variable](const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
      std::vector<Tensor> grads(2);
      if (needs[0]) grads[0] = dy[0];
      if (needs[1]) {
        const int64_t channels = bias_shape[0];
        grads[1] = detail::grad_buffer(bias_shape, bias_is_variable);
        if (detail::compute(grads[1], {&dy[0]}) && channels > 0) {
          ConstMatrixMap dym(dy[0].data(), dy[0].size() / channels, channels);
          Eigen::Map<Eigen::RowVectorXf>(grads[1].data(), channels) = dym.colwise().sum();
        }
      }
      return grads;
    });
  }
  return y;
}

Tensor add(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) {
    detail::shape_error("add", "shapes differ: " + shape_string(a.shape()) + " and " + shape_string(b.shape()));
  }
  Tensor y = Tensor::empty(a.shape());
  if (detail::compute(y, {&a, &b})) y.array() = a.array() + b.array();
  if (GradientTape::is_recording({&a, &b})) {
    GradientTape::record({a, b}, {y}, [](const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
      return std::vector<Tensor>{needs[0] ? dy[0] : Tensor(), needs[1] ? dy[0] : Tensor()};
    });
  }
  return y;
}

Tensor scale(const Tensor& x, float factor) {
  Tensor y = Tensor::empty(x.shape());
  if (detail::compute(y, {&x})) y.array() = x.array() * factor;
  if (GradientTape::is_recording({&x})) {
    GradientTape::record({x}, {y}, [factor](const std::vector<Tensor>& dy, const std::vector<bool>&) {
      Tensor dx = Tensor::empty(dy[0].shape());
      if (detail::compute(dx, {&dy[0]})) dx.array() = dy[0].array() * factor;
      return std::vector<Tensor>{dx};
    });
  }
  return y;
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  Tensor y = x.reshape(shape);
  if (GradientTape::is_recording({&x})) {
    const Shape in_shape = x.shape();
    GradientTape::record({x}, {y}, [in_shape](const std::vector<Tensor>& dy, const std::vector<bool>&) {
      return std::vector<Tensor>{dy[0].reshape(in_shape)};
    });
  }
  return y;
}

}  // namespace keel::ops
