// Full reductions to a scalar: reduce_sum, reduce_mean.
#include "framework/autodiff/tape.h"
#include "framework/ops/op_util.h"
#include "framework/ops/ops.h"

namespace keel::ops {
namespace {

Tensor reduce_scaled(const Tensor& x_in, float factor) {
  const Tensor x = detail::operand(x_in, DType::float32).value;  // a bfloat16 input widened exactly
  Tensor y = Tensor::empty({});
  if (detail::compute(y, {&x})) y.data()[0] = static_cast<float>(x.array().cast<double>().sum() * factor);
  if (GradientTape::is_recording({&x_in})) {
    const Shape shape = x.shape();
    GradientTape::record({x_in}, {y}, [shape, factor](const std::vector<Tensor>& dy, const std::vector<bool>&) {
      Tensor dx = Tensor::empty(shape);
      if (detail::compute(dx, {&dy[0]})) dx.fill(dy[0].data()[0] * factor);
      return std::vector<Tensor>{dx};
    });
  }
  return y;
}

}  // namespace

Tensor reduce_sum(const Tensor& x) { return reduce_scaled(x, 1.0f); }

Tensor reduce_mean(const Tensor& x) {
  return reduce_scaled(x, x.size() > 0 ? 1.0f / static_cast<float>(x.size()) : 0.0f);
}

}  // namespace keel::ops
