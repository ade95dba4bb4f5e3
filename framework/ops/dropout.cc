// Inverted dropout with a counter-based mask: the mask of element i is a function of (key, i) only.
#include "framework/autodiff/tape.h"
#include "framework/core/random.h"
#include "framework/ops/op_util.h"
#include "framework/ops/ops.h"

namespace keel::ops {

Tensor dropout(const Tensor& x, float rate, uint64_t key) {
  if (!(rate >= 0.0f && rate < 1.0f)) detail::shape_error("dropout", "rate must be in [0, 1), got " + std::to_string(rate));
  // The mask holds 0 or 1/(1 - rate) (rounded to bfloat16 under bfloat16, and kept as one): saved for
  // backward, charged like any saved activation.
  const DType dt = compute_dtype();
  const Tensor xv = detail::operand(x, dt).value;
  Tensor mask = detail::output_buffer(x.shape(), dt);
  Tensor y = detail::output_buffer(x.shape(), dt);
  if (detail::compute(y, {&xv})) {
    const float keep_scale = dt == DType::bfloat16 ? round_to_bfloat16(1.0f / (1.0f - rate)) : 1.0f / (1.0f - rate);
    Rng rng(key);
    float* m = mask.data();
    const int64_t n = x.size();
    for (int64_t i = 0; i < n; ++i) m[i] = rng.next_float() < rate ? 0.0f : keep_scale;
    y.array() = xv.array() * mask.array();
  }
  mask = detail::finish(mask, dt);
  y = detail::finish(y, dt);
  if (GradientTape::is_recording({&x})) {
    GradientTape::record({x}, {y}, [mask, dt](const std::vector<Tensor>& dy, const std::vector<bool>&) {
      Tensor dx = Tensor::empty(mask.shape());
      const Tensor mv = detail::compute_values(mask, dt);
      if (detail::compute(dx, {&dy[0], &mv})) dx.array() = dy[0].array() * mv.array();
      return std::vector<Tensor>{dx};
    });
  }
  return y;
}

}  // namespace keel::ops
