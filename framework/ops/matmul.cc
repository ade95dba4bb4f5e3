// matmul: (N, K) x (K, M) -> (N, M) through Eigen's GEMM, on the replica's share of the threads (ops/gemm.h).
#include <memory>
#include <span>

#include "framework/autodiff/tape.h"
#include "framework/device/replica_context.h"
#include "framework/ops/gemm.h"
#include "framework/ops/op_util.h"
#include "framework/ops/ops.h"

namespace keel::ops {
namespace {

// Kernel gradients smaller than this are computed at once: the tiles would save little.
constexpr int64_t kMinDeferredElements = 1 << 14;

// grad = aᵀ · dy left to the step's all-reduce (ReplicaContext::defer) where the step allows it and the
// product is one oneDNN product per tile (not cut along its inner dimension, framework/ops/gemm.h),
// whose rows computed apart have the bits of the whole. Its operands are copied to host memory: the
// tape releases a and dy, as a device would, before the all-reduce reads them.
bool defer_kernel_gradient(const Tensor& grad, const Tensor& a, const Tensor& dy, DType dt) {
  ReplicaContext* ctx = current_replica_context();
  if (ctx == nullptr || !ctx->allows_deferred_products() || dt != DType::float32 || grad.is_abstract() ||
      grad.size() < kMinDeferredElements || a.dtype() != DType::float32 || dy.dtype() != DType::float32) {
    return false;
  }
  const int64_t n = a.dim(0), k = a.dim(1), m = dy.dim(1);
  if (detail::gemm_segments(k, m, n) != 1) return false;
  const Tensor a_copy = Tensor::from_vector(a.shape(), std::span<const float>(a.data(), static_cast<size_t>(a.size())));
  const Tensor dy_copy = Tensor::from_vector(dy.shape(), std::span<const float>(dy.data(), static_cast<size_t>(dy.size())));
  auto product = std::make_shared<DeferredProduct>();
  product->rows = k;
  product->cols = m;
  product->compute_rows = [a_copy, dy_copy, n, k, m](int64_t begin, int64_t end, float* out) {
    const detail::GemmOperand at{a_copy.data(), k, /*transposed=*/true}, dys{dy_copy.data(), m, false};
    detail::sgemm(at.at(begin, 0), dys, out, m, end - begin, m, n, /*accumulate=*/false);
  };
  ctx->defer(grad, std::move(product));
  return true;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (a.rank() != 2 || b.rank() != 2 || a.dim(1) != b.dim(0)) {
    detail::shape_error("matmul", "cannot multiply " + shape_string(a.shape()) + " by " + shape_string(b.shape()));
  }
  const DType dt = compute_dtype();
  const detail::Operand ao = detail::operand(a, dt), bo = detail::operand(b, dt);
  Tensor y = detail::output_buffer({a.dim(0), b.dim(1)}, dt);
  detail::count_forward_flops(2 * a.dim(0) * a.dim(1) * b.dim(1));
  if (detail::compute(y, {&ao.value, &bo.value})) detail::gemm(y.matrix(), ao.value.matrix(), bo.value.matrix());
  y = detail::finish(y, dt);
  if (GradientTape::is_recording({&a, &b})) {
    const bool a_is_variable = a.is_trainable_variable(), b_is_variable = b.is_trainable_variable();
    GradientTape::record({a, b}, {y}, [a = ao.kept, b = bo.kept, dt, a_is_variable, b_is_variable](
                                          const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
      std::vector<Tensor> grads(2);
      if (needs[0]) {  // da = dy · bᵀ   (N, K)
        grads[0] = detail::grad_buffer(a.shape(), a_is_variable);
        const Tensor bv = detail::compute_values(b, dt);
        if (detail::compute(grads[0], {&dy[0]})) detail::gemm(grads[0].matrix(), dy[0].matrix(), bv.matrix().transpose());
      }
      if (needs[1]) {  // db = aᵀ · dy   (K, M)
        grads[1] = detail::grad_buffer(b.shape(), b_is_variable);
        const Tensor av = detail::compute_values(a, dt);
        // Unless the all-reduce computes it.
        if (detail::compute(grads[1], {&dy[0]}) && !(b_is_variable && defer_kernel_gradient(grads[1], av, dy[0], dt))) {
          detail::gemm(grads[1].matrix(), av.matrix().transpose(), dy[0].matrix());
        }
      }
      return grads;
    });
  }
  return y;
}

}  // namespace keel::ops
