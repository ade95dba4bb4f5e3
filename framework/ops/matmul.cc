// matmul: (N, K) x (K, M) -> (N, M) through oneDNN's sgemm (ops/gemm.h), on the replica's share of the
// threads; a replicated layer's kernel gradient through keel's chained products (device/chained_product.h).
#include <algorithm>
#include <memory>
#include <span>
#include <utility>

#include "framework/autodiff/tape.h"
#include "framework/core/thread_pool.h"
#include "framework/device/chained_product.h"
#include "framework/device/replica_context.h"
#include "framework/ops/gemm.h"
#include "framework/ops/op_util.h"
#include "framework/ops/ops.h"

namespace keel::ops {
namespace {

constexpr int64_t kChainedRowBlock = 64;

// Whether a variable's gradient aᵀ · dy is a replicated layer's that keel's chained products compute
// (detail::chained_kernel_gradient): float32, summed over two or more replicas.
bool chained_kernel_gradient(const Tensor& a, const Tensor& dy, DType dt) {
  const ReplicaContext* ctx = current_replica_context();
  return ctx != nullptr && dt == DType::float32 && a.dtype() == DType::float32 && dy.dtype() == DType::float32 &&
         detail::chained_kernel_gradient(a.dim(1), dy.dim(1), a.dim(0), ctx->num_replicas());
}

// grad = aᵀ · dy left to the step's all-reduce (ReplicaContext::defer) where the step allows it. The
// tape releases a and dy, as a device would, before the all-reduce reads them: dy is copied to host
// memory, and so is a unless its bytes are a host buffer's already (an infeed shard taken in place
// from its batch, ReplicatedStrategy::distribute), which the product then keeps alive instead.
bool defer_kernel_gradient(const Tensor& grad, const Tensor& a, const Tensor& dy) {
  ReplicaContext* ctx = current_replica_context();
  if (!ctx->allows_deferred_products() || grad.is_abstract()) return false;
  std::shared_ptr<const Storage> a_host = a.storage().host_source();
  const Tensor a_copy =
      a_host != nullptr ? Tensor()
                        : Tensor::from_vector(a.shape(), std::span<const float>(a.data(), static_cast<size_t>(a.size())));
  const Tensor dy_copy = Tensor::from_vector(dy.shape(), std::span<const float>(dy.data(), static_cast<size_t>(dy.size())));
  auto product = std::make_shared<DeferredProduct>();
  product->rows = a.dim(1);
  product->cols = dy.dim(1);
  product->operands = {a_host != nullptr ? a.data() : a_copy.data(), a.dim(1), dy_copy.data(), dy.dim(1), a.dim(0)};
  struct Owner {
    std::shared_ptr<const Storage> a_host;
    Tensor a_copy, dy_copy;
  };
  product->owner = std::make_shared<Owner>(Owner{std::move(a_host), a_copy, dy_copy});
  ctx->defer(grad, std::move(product));
  return true;
}

// grad = aᵀ · dy by the chained products, in blocks of rows over the replica's share of the threads.
void chained_kernel_product(Tensor& grad, const Tensor& a, const Tensor& dy) {
  const int64_t rows = a.dim(1), cols = dy.dim(1);
  const ChainedOperands operands{a.data(), rows, dy.data(), cols, a.dim(0)};
  float* out = grad.data();
  const double flops = 2.0 * static_cast<double>(rows) * static_cast<double>(cols) * static_cast<double>(a.dim(0));
  parallel_for(
      (rows + kChainedRowBlock - 1) / kChainedRowBlock,
      [&](int64_t t) {
        const int64_t begin = t * kChainedRowBlock, end = std::min(rows, begin + kChainedRowBlock);
        chained_products({&operands, 1}, begin, end, 0, cols, out + begin * cols, cols, 1);
      },
      threads_worth(flops, detail::kGemmMinFlopsPerThread));
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
    const uint64_t b_placement = detail::placement_key(b);
    GradientTape::record({a, b}, {y}, [a = ao.kept, b = bo.kept, dt, a_is_variable, b_is_variable, b_placement](
                                          const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
      std::vector<Tensor> grads(2);
      if (needs[0]) {  // da = dy · bᵀ   (N, K)
        grads[0] = detail::grad_buffer(a.shape(), a_is_variable);
        const Tensor bv = detail::compute_values(b, dt);
        if (detail::compute(grads[0], {&dy[0]})) detail::gemm(grads[0].matrix(), dy[0].matrix(), bv.matrix().transpose());
      }
      if (needs[1]) {  // db = aᵀ · dy   (K, M)
        grads[1] = detail::grad_buffer(b.shape(), b_is_variable, b_placement);
        const Tensor av = detail::compute_values(a, dt);
        if (!detail::compute(grads[1], {&dy[0]})) return grads;
        if (!b_is_variable || !chained_kernel_gradient(av, dy[0], dt)) {
          detail::gemm(grads[1].matrix(), av.matrix().transpose(), dy[0].matrix());
        } else if (!defer_kernel_gradient(grads[1], av, dy[0])) {  // else the all-reduce computes it
          chained_kernel_product(grads[1], av, dy[0]);
        }
      }
      return grads;
    });
  }
  return y;
}

}  // namespace keel::ops
