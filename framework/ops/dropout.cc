// Inverted dropout with a counter-based mask: the mask of element i is a function of (key, i) only.
#include "framework/autodiff/tape.h"
#include "framework/core/random.h"
#include "framework/ops/op_util.h"
#include "framework/ops/ops.h"

namespace keel::ops {

Tensor dropout(const Tensor& x, float rate, uint64_t key) {
  if (!(rate >= 0.0f && rate < 1.0f)) detail::shape_error("dropout", "rate must be in [0, 1), got " + std::to_string(rate));
  // The mask holds 0 or 1/(1 - rate): saved for backward, charged like any saved activation.
  Tensor mask = Tensor::empty(x.shape());
  Tensor y = Tensor::empty(x.shape());
  if (detail::compute(y, {&x})) {
    const float keep_scale = 1.0f / (1.0f - rate);
    Rng rng(key);
    float* m = mask.data();
    for (int64_t i = 0; i < x.size(); ++i) m[i] = rng.next_float() < rate ? 0.0f : keep_scale;
    y.array() = x.array() * mask.array();
  }
  if (GradientTape::is_recording({&x})) {
    GradientTape::record({x}, {y}, [mask](const std::vector<Tensor>& dy, const std::vector<bool>&) {
      Tensor dx = Tensor::empty(mask.shape());
      if (detail::compute(dx, {&dy[0], &mask})) dx.array() = dy[0].array() * mask.array();
      return std::vector<Tensor>{dx};
    });
  }
  return y;
}

}  // namespace keel::ops
