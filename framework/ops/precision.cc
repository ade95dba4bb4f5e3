#include "framework/ops/precision.h"

#include "framework/autodiff/tape.h"
#include "framework/core/fiber_locals.h"
#include "framework/ops/op_util.h"

namespace keel::ops {
namespace {

thread_local DType t_compute_dtype = DType::float32;
DType& compute_dtype_of_thread() { return t_compute_dtype; }
const FiberLocal<DType, compute_dtype_of_thread> kComputeDTypeFollowsTheReplica;

}  // namespace

DType compute_dtype() { return t_compute_dtype; }

ComputeDTypeScope::ComputeDTypeScope(DType dtype) : saved_(t_compute_dtype) { t_compute_dtype = dtype; }
ComputeDTypeScope::~ComputeDTypeScope() { t_compute_dtype = saved_; }

Tensor cast(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor y = x.to(dtype);
  if (GradientTape::is_recording({&x})) {
    const Shape shape = x.shape();
    const bool is_variable = x.is_trainable_variable();
    GradientTape::record({x}, {y}, [shape, is_variable](const std::vector<Tensor>& dy, const std::vector<bool>&) {
      if (!is_variable) return std::vector<Tensor>{dy[0]};
      Tensor dx = detail::grad_buffer(shape, true);
      dx.copy_from(dy[0]);
      return std::vector<Tensor>{dx};
    });
  }
  return y;
}

namespace detail {

Tensor compute_values(const Tensor& kept, DType compute) {
  if (kept.dtype() == DType::bfloat16) {
    CategoryScope workspace(Category::workspace);
    return kept.to(DType::float32);
  }
  if (compute == DType::float32) return kept;
  CategoryScope workspace(Category::workspace);
  Tensor rounded = Tensor::empty(kept.shape());
  if (!rounded.is_abstract() && !kept.is_abstract() && kept.size() > 0) round_bfloat16(kept.data(), rounded.data(), kept.size());
  return rounded;
}

Operand operand(const Tensor& x, DType compute) {
  if (compute == DType::float32 || x.dtype() == DType::bfloat16 || x.is_trainable_variable()) {
    return {x, compute_values(x, compute)};
  }
  // A float32 activation read under bfloat16: kept as its bfloat16 copy (an activation, 2 bytes each).
  Tensor kept = x.to(DType::bfloat16);
  return {kept, compute_values(kept, compute)};
}

Tensor output_buffer(const Shape& shape, DType compute) {
  if (compute == DType::float32) return Tensor::empty(shape);
  CategoryScope workspace(Category::workspace);
  return Tensor::empty(shape);
}

Tensor finish(const Tensor& y, DType compute) {
  return compute == DType::float32 ? y : y.to(DType::bfloat16);
}

}  // namespace detail
}  // namespace keel::ops
