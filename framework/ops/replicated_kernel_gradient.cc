// A replicated layer's kernel gradient by keel's chained products (ops/replicated_kernel_gradient.h).
#include "framework/ops/replicated_kernel_gradient.h"

#include <algorithm>
#include <memory>
#include <span>
#include <utility>

#include "framework/core/thread_pool.h"
#include "framework/device/chained_product.h"
#include "framework/device/replica_context.h"
#include "framework/ops/gemm.h"

namespace keel::ops {
namespace {

constexpr int64_t kChainedRowBlock = 64;

// Pointwise layers whose replicas' products are this short (ResNet50's last two stages at 32x32, 16
// images a replica) write their whole gradient for a few multiply-adds each, so the replicas' copies
// and their tree sum cost more than the products; over more rows (the same layers at 224x224: 196 a
// replica at 4 images) oneDNN's sgemm ran faster than the chained products and the sums cost little
// (perf record of custom:2 training steps, 2026-11-30).
constexpr int64_t kChainedPointwiseMaxRows = 128;

// Whether a variable's gradient aᵀ · dy is a replicated layer's that keel's chained products compute
// (chained_kernel_gradient in ops/gemm.h): float32 operands, summed over two or more replicas.
bool takes_chained_products(const Tensor& a, const Tensor& dy) {
  const ReplicaContext* ctx = current_replica_context();
  return ctx != nullptr && a.dtype() == DType::float32 && dy.dtype() == DType::float32 &&
         detail::chained_kernel_gradient(a.dim(1), dy.dim(1), a.dim(0), ctx->num_replicas());
}

// grad's rows [first_row, first_row + a's columns) = aᵀ · dy, its other rows zeros, left to the step's
// all-reduce (ReplicaContext::defer) where the step allows it. The tape releases a and dy, as a device
// would, before the all-reduce reads them: dy is copied to host memory, and so is a unless its bytes
// are a host buffer's already (an infeed shard taken in place from its batch,
// ReplicatedStrategy::distribute), which the product then keeps alive instead.
bool defer_kernel_gradient(const Tensor& grad, int64_t first_row, const Tensor& a, const Tensor& dy) {
  ReplicaContext* ctx = current_replica_context();
  if (!ctx->allows_deferred_products() || grad.is_abstract()) return false;
  std::shared_ptr<const Storage> a_host = a.storage().host_source();
  const Tensor a_copy =
      a_host != nullptr ? Tensor()
                        : Tensor::from_vector(a.shape(), std::span<const float>(a.data(), static_cast<size_t>(a.size())));
  const Tensor dy_copy = Tensor::from_vector(dy.shape(), std::span<const float>(dy.data(), static_cast<size_t>(dy.size())));
  auto product = std::make_shared<DeferredProduct>();
  product->rows = grad.dim(0);
  product->cols = dy.dim(1);
  product->first_row = first_row;
  product->product_rows = a.dim(1);
  product->operands = {a_host != nullptr ? a.data() : a_copy.data(), a.dim(1), dy_copy.data(), dy.dim(1), a.dim(0)};
  struct Owner {
    std::shared_ptr<const Storage> a_host;
    Tensor a_copy, dy_copy;
  };
  product->owner = std::make_shared<Owner>(Owner{std::move(a_host), a_copy, dy_copy});
  ctx->defer(grad, std::move(product));
  return true;
}

// grad's rows as defer_kernel_gradient describes them, by the chained products, in blocks of rows over
// the replica's share of the threads.
void chained_kernel_product(Tensor& grad, int64_t first_row, const Tensor& a, const Tensor& dy) {
  const int64_t rows = grad.dim(0), cols = dy.dim(1);
  const ChainedOperands operands{a.data(), a.dim(1), dy.data(), cols, a.dim(0)};
  float* out = grad.data();
  const double flops = 2.0 * static_cast<double>(a.dim(1)) * static_cast<double>(cols) * static_cast<double>(a.dim(0));
  parallel_for(
      (rows + kChainedRowBlock - 1) / kChainedRowBlock,
      [&](int64_t t) {
        const int64_t begin = t * kChainedRowBlock, end = std::min(rows, begin + kChainedRowBlock);
        chained_value_rows({&operands, 1}, first_row, a.dim(1), begin, end, 0, cols, out + begin * cols, cols, 1);
      },
      threads_worth(flops, detail::kGemmMinFlopsPerThread));
}

// grad (rows x width) with rows [first_row, first_row + k) = aᵀ · dy and zeros elsewhere, as
// detail::replicated_kernel_gradient computes or defers it.
bool chained_or_deferred(Tensor& grad, int64_t first_row, const Tensor& a, const Tensor& dy) {
  if (!takes_chained_products(a, dy)) return false;
  if (!defer_kernel_gradient(grad, first_row, a, dy)) chained_kernel_product(grad, first_row, a, dy);  // else the all-reduce does
  return true;
}

}  // namespace

bool detail::replicated_kernel_gradient(Tensor& grad, const Tensor& a, const Tensor& dy) {
  return chained_or_deferred(grad, 0, a, dy);
}

bool detail::replicated_pointwise_kernel_gradient(const ConvGeometry& g, const Tensor& x, const Tensor& dy, Tensor& dk) {
  const int64_t rows = g.rows(), cin = g.in_channels, cout = g.out_channels;
  const int64_t tap = g.pointwise() ? 0 : g.single_tap(), taps = g.h.kernel * g.w.kernel;
  if (tap < 0 || rows > kChainedPointwiseMaxRows || rows * (cin + cout) > taps * cin * cout) return false;
  Tensor matrix = dk.reshape({taps * cin, cout});
  return chained_or_deferred(matrix, tap * cin, x.reshape({rows, cin}), dy.reshape({rows, cout}));
}

}  // namespace keel::ops
