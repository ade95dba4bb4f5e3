// Ops' arithmetic inside a host program (ops/host_program.h).
#include "framework/ops/host_program.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "framework/autodiff/recompute.h"
#include "framework/core/thread_pool.h"
#include "framework/device/chained_product.h"
#include "framework/device/collectives.h"
#include "framework/device/context.h"
#include "framework/device/ledger.h"
#include "framework/ops/gemm.h"
#include "framework/ops/op_util.h"

namespace keel::ops::detail {
namespace {

// Rows of a chained kernel gradient per task: whole blocks of the chained products.
constexpr int64_t kChainedTaskRows = 4 * kChainedBlockRows;

// Host memory of the calling thread for the replicas' partial results, reused, outside the ledger
// (as gemm_scratch): `parts` slots of `each` floats, every slot 64-byte aligned, as a tensor's buffer
// is, so that each replica's kernels run on the alignment they have on its own buffer.
float* replica_scratch(int parts, int64_t each, int64_t& stride) {
  stride = (each + 15) / 16 * 16;
  thread_local std::vector<float> scratch;
  const size_t floats = static_cast<size_t>(parts) * static_cast<size_t>(stride) + 16;
  if (scratch.size() < floats) scratch.resize(floats);
  const auto address = reinterpret_cast<uintptr_t>(scratch.data());
  return reinterpret_cast<float*>((address + 63) & ~uintptr_t{63});
}

int64_t equal_rows(const ReplicaRows& rows, const char* op) {
  for (int r = 1; r < rows.replicas(); ++r) {
    if (rows.rows(r) != rows.rows(0)) throw std::logic_error(std::string(op) + ": replicas of unequal rows in a host program");
  }
  return rows.rows(0);
}

}  // namespace

const ReplicaRows* rows_of(const Tensor& x) {
  const ReplicaRows* rows = replica_rows();
  return rows != nullptr && x.defined() && x.rank() >= 1 && x.dim(0) == rows->total() ? rows : nullptr;
}

void replica_products(Tensor& y, const Tensor& a, const Tensor& b, bool transpose_b, const ReplicaRows& rows) {
  const int64_t k = a.dim(1), m = y.dim(1);
  const float* in = a.data();
  float* out = y.data();
  const ConstMatrixMap bm = b.matrix();
  const double flops = 2.0 * static_cast<double>(a.dim(0)) * static_cast<double>(k) * static_cast<double>(m);
  parallel_for(
      rows.replicas(),
      [&](int64_t r) {
        const KernelThreadsScope one(1);
        const int64_t begin = rows.begin(static_cast<int>(r)), n = rows.rows(static_cast<int>(r));
        const ConstMatrixMap ar(in + begin * k, n, k);
        if (transpose_b) {
          gemm(MatrixMap(out + begin * m, n, m), ar, bm.transpose());
        } else {
          gemm(MatrixMap(out + begin * m, n, m), ar, bm);
        }
      },
      threads_worth(flops, kGemmMinFlopsPerThread));
}

void replica_mean_kernel_gradient(Tensor& grad, const Tensor& a, const Tensor& dy, const ReplicaRows& rows) {
  const int replicas = rows.replicas();
  const int64_t n = equal_rows(rows, "matmul"), k = a.dim(1), m = dy.dim(1);
  const float* x = a.data();
  const float* d = dy.data();
  float* out = grad.data();
  const double flops = 2.0 * static_cast<double>(k) * static_cast<double>(m) * static_cast<double>(n) * replicas;
  if (chained_kernel_gradient(k, m, n, replicas) && replicas <= kMaxChainedParts) {
    std::vector<ChainedOperands> parts;
    for (int r = 0; r < replicas; ++r) parts.push_back({x + rows.begin(r) * k, k, d + rows.begin(r) * m, m, n});
    parallel_for(
        (k + kChainedTaskRows - 1) / kChainedTaskRows,
        [&](int64_t t) {
          const int64_t begin = t * kChainedTaskRows, end = std::min(k, begin + kChainedTaskRows);
          chained_value_rows(parts, 0, k, begin, end, 0, m, out + begin * m, m, replicas);
        },
        threads_worth(flops, kGemmMinFlopsPerThread));
    return;
  }
  int64_t stride = 0;
  float* partial = replica_scratch(replicas, k * m, stride);
  parallel_for(
      replicas,
      [&](int64_t r) {
        const KernelThreadsScope one(1);
        const int64_t begin = rows.begin(static_cast<int>(r));
        gemm(MatrixMap(partial + r * stride, k, m), ConstMatrixMap(x + begin * k, n, k).transpose(),
             ConstMatrixMap(d + begin * m, n, m));
      },
      threads_worth(flops, kGemmMinFlopsPerThread));
  std::vector<const float*> parts;
  for (int r = 0; r < replicas; ++r) parts.push_back(partial + r * stride);
  tree_sum_into(parts, out, k * m, replicas, /*check=*/false);
}

void replica_mean_column_sums(const Tensor& dy, float* out, const ReplicaRows& rows) {
  const int replicas = rows.replicas();
  const int64_t cols = dy.dim(-1), width = dy.size() / std::max<int64_t>(dy.dim(0), 1);
  if (cols != width) throw std::logic_error("bias_add: a host program's gradient of (rows, channels) expected");
  int64_t stride = 0;
  float* partial = replica_scratch(replicas, cols, stride);
  std::vector<const float*> parts;
  for (int r = 0; r < replicas; ++r) {
    column_sums(dy.data() + rows.begin(r) * cols, rows.rows(r), cols, cols, partial + r * stride);
    parts.push_back(partial + r * stride);
  }
  tree_sum_into(parts, out, cols, replicas, /*check=*/false);
}

void count_forward_flops_by_rows(int64_t flops_per_row, const ReplicaRows& rows) {
  const DeviceContext& ctx = device_context();
  if (ctx.ledger == nullptr || ctx.ledger->num_cores() != rows.replicas()) return;
  for (int c = 0; c < rows.replicas(); ++c) ctx.ledger->core(c).record_flops(flops_per_row * rows.rows(c), recomputing());
}

}  // namespace keel::ops::detail
