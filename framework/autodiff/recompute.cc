#include "framework/autodiff/recompute.h"

#include <memory>

#include "framework/autodiff/tape.h"
#include "framework/core/fiber_locals.h"

namespace keel {
namespace {

bool& recomputing_flag() {
  thread_local bool on = false;
  return on;
}
const FiberLocal<bool, recomputing_flag> kRecomputingFollowsTheReplica;

// Marks this thread as recomputing while it lives (nested segments keep the outer mark).
class RecomputingScope {
 public:
  RecomputingScope() : saved_(recomputing_flag()) { recomputing_flag() = true; }
  ~RecomputingScope() { recomputing_flag() = saved_; }
  RecomputingScope(const RecomputingScope&) = delete;
  RecomputingScope& operator=(const RecomputingScope&) = delete;

 private:
  bool saved_;
};

// Backward of a segment: its forward again on a tape of its own, then that tape's gradients of the
// input and the variables, starting from the gradient of the segment's output.
std::vector<Tensor> backward_by_recomputing(const SegmentFn& fn, const Tensor& x, const std::vector<Tensor>& sources,
                                            const Tensor& output_gradient, const std::vector<bool>& needs_grad) {
  const RecomputingScope recompute;
  const GradientTape::StopRecording alone;  // only the inner tape sees the recomputed ops
  GradientTape inner;
  if (needs_grad[0]) inner.watch(x);
  const Tensor y = fn(x);
  std::vector<Tensor> grads = inner.gradient(y, sources, nullptr, output_gradient);
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!needs_grad[i]) grads[i] = Tensor();
  }
  return grads;
}

}  // namespace

bool recomputing() { return recomputing_flag(); }

Tensor recompute_in_backward(const SegmentFn& fn, const Tensor& x, const std::vector<Variable*>& variables) {
  std::vector<Tensor> inputs = {x};
  for (const Variable* v : variables) inputs.push_back(v->value());
  bool recording = false;
  for (const Tensor& t : inputs) recording = recording || GradientTape::is_recording({&t});
  if (!recording) return fn(x);
  Tensor y;
  {
    const GradientTape::StopRecording forward_only;
    y = fn(x);
  }
  // Saved for backward: the input alone (and fn, which holds no tensors).
  GradientTape::record(inputs, {y}, [fn, inputs](const std::vector<Tensor>& grad_outputs, const std::vector<bool>& needs_grad) {
    return backward_by_recomputing(fn, inputs[0], inputs, grad_outputs[0], needs_grad);
  });
  return y;
}

}  // namespace keel
