// Test support for conv2d's two kernels (framework/ops/conv.h): a scope that runs convolutions on one
// backend, the backends to loop over, the gradients of a convolution through the tape, and the
// geometry of a "same" convolution.
//
//   for (ops::ConvBackend b : kConvBackends) { const ConvBackendScope backend(b); ... }
#pragma once

#include <array>
#include <vector>

#include "framework/autodiff/tape.h"
#include "framework/ops/conv.h"
#include "framework/ops/conv_geometry.h"
#include "framework/ops/ops.h"

namespace keel::testing {

// Runs conv2d's convolutions on one backend for the scope's lifetime.
class ConvBackendScope {
 public:
  explicit ConvBackendScope(ops::ConvBackend backend) : saved_(ops::conv_backend()) { ops::set_conv_backend(backend); }
  ~ConvBackendScope() { ops::set_conv_backend(saved_); }
  ConvBackendScope(const ConvBackendScope&) = delete;
  ConvBackendScope& operator=(const ConvBackendScope&) = delete;

 private:
  ops::ConvBackend saved_;
};

inline constexpr ops::ConvBackend kConvBackends[] = {ops::ConvBackend::onednn, ops::ConvBackend::im2col};
inline const char* conv_backend_name(ops::ConvBackend b) { return b == ops::ConvBackend::onednn ? "onednn" : "im2col"; }

// The gradients of sum(y * dy) w.r.t. (x, kernel), through the tape.
inline std::vector<Tensor> conv_gradients(const Tensor& x, const Tensor& kernel, const Tensor& dy,
                                          std::array<int, 2> strides, ops::Padding padding, std::array<int, 2> dilation) {
  GradientTape tape;
  tape.watch(x);
  tape.watch(kernel);
  Tensor y = ops::conv2d(x, kernel, strides, padding, dilation);
  Tensor target = ops::matmul(ops::reshape(y, {1, y.size()}), ops::reshape(dy, {dy.size(), 1}));
  return tape.gradient(target, {x, kernel});
}

// The geometry of conv2d(x of shape xs, kernel of shape ks, strides (stride, stride), "same").
inline ops::detail::ConvGeometry same_geometry(const Shape& xs, const Shape& ks, int stride = 1) {
  ops::detail::ConvGeometry g;
  g.batch = xs[0], g.in_channels = xs[3], g.out_channels = ks[3];
  g.h = ops::window_axis("conv2d", xs[1], ks[0], stride, 1, ops::Padding::same);
  g.w = ops::window_axis("conv2d", xs[2], ks[1], stride, 1, ops::Padding::same);
  return g;
}

}  // namespace keel::testing
