// Column-parallel Dense (Megatron-LM's ColumnParallelLinear; GSPMD's kernel split on its output
// axis) for a kernel (K, N) that a LayoutMap splits along N across the cores (framework/device/layout.h).
//
// Forward, on core j of n: every replica's rows are all-gathered (K wide, `workspace`), core j
// multiplies all of them by its columns Nj of the kernel (and adds its columns of a split bias), and
// an all-to-all gives each replica its own rows with every column. Backward: the output's gradient
// goes the other way (core j gets every replica's rows of its columns); core j computes each
// replica's kernel gradient for its columns — the stack (n, K, Nj) is the kernel's gradient, reduced
// to its mean by the optimizer, or as soon as backward has finished it (train/optimizers.h); the
// input's gradient dy · kernelᵀ needs the whole kernel, which core j gathers for it (`workspace`,
// "gathered:<owner>").
//
// The numbers are the replicated layer's: each per-replica product has that layer's inner dimension
// and cut (gemm_operands' as_if_columns), or is its columns of the chained product where the
// replicated layer's is one (detail::chained_kernel_gradient); each bias column sums the same rows in
// the same order, and the stack is summed in the collectives' tree order — bit-identical training.
#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "framework/autodiff/tape.h"
#include "framework/device/chained_product.h"
#include "framework/device/replica_context.h"
#include "framework/ops/gemm.h"
#include "framework/ops/op_util.h"
#include "framework/ops/ops.h"

namespace keel::ops {

namespace {

// Each replica's share of `count` columns (shard_range's sizes).
std::vector<int64_t> column_splits(int64_t count, int replicas) {
  std::vector<int64_t> out;
  for (int r = 0; r < replicas; ++r) out.push_back(shard_range(count, replicas, r).size());
  return out;
}

// out (m x c, contiguous) = the columns `cols` of a (m x k) · b (k x width), with the bits they have
// in the whole product. oneDNN's sgemm computes a single row or a single column on another path
// (gemv), where an element's sum depends on the shape: there the core computes every column into
// host scratch (outside the ledger: a TPU core has no such path) and keeps its own.
void product_columns(float* out, int64_t m, int64_t k, detail::GemmOperand a, detail::GemmOperand b, int64_t width,
                     ShardRange cols) {
  const int64_t c = cols.size();
  if (m == 0 || c == 0) return;
  if ((m >= 2 && c >= 2) || c == width) {
    detail::gemm_operands(out, c, m, c, k, a, b.at(0, cols.begin), /*accumulate=*/false, /*as_if_columns=*/width);
    return;
  }
  thread_local std::vector<float> whole;
  whole.resize(static_cast<size_t>(m * width));
  detail::gemm_operands(whole.data(), width, m, width, k, a, b);
  for (int64_t r = 0; r < m; ++r) std::copy_n(whole.data() + r * width + cols.begin, c, out + r * c);
}

// out (R x c): for every replica i, its rows of x_all times the kernel's columns `cols`, as the
// replicated layer multiplies them (rows_before: each replica's first row in x_all).
void multiply_columns(const Tensor& x_all, const std::vector<int64_t>& rows_before, const Tensor& kernel, ShardRange cols,
                      Tensor& out) {
  const int64_t k = kernel.dim(0), width = kernel.dim(1), c = cols.size();
  for (size_t i = 0; i + 1 < rows_before.size(); ++i) {
    const int64_t r0 = rows_before[i];
    product_columns(out.data() + r0 * c, rows_before[i + 1] - r0, k, {x_all.data() + r0 * k, k, false},
                    {kernel.data(), width, false}, width, cols);
  }
}

// The whole kernel on this core while it lives (dy · kernelᵀ): the bytes a device would gather,
// counted, and charged as `workspace`. In one process the replicas share its host buffer.
class GatheredKernel {
 public:
  GatheredKernel(const ReplicaContext& ctx, const Tensor& kernel, const std::string& owner) {
    std::vector<Tensor> whole{kernel};
    ctx.all_gather_shards(whole);
    const DeviceContext& here = device_context();
    if (here.ledger != nullptr && here.core >= 0) {
      ledger_ = here.ledger->core_ptr(here.core);
      handle_ = ledger_->charge(kernel.bytes(), Category::workspace, "gathered:" + owner, kernel.shape());
    }
  }
  ~GatheredKernel() {
    if (handle_ != 0) ledger_->release(handle_);
  }
  GatheredKernel(const GatheredKernel&) = delete;
  GatheredKernel& operator=(const GatheredKernel&) = delete;

 private:
  std::shared_ptr<CoreLedger> ledger_;
  uint64_t handle_ = 0;
};

// The kernel's (and a split bias's) gradient stacks for this core's columns, from dy (rows_j x N) and
// x as the layer computed with it; `kernel` gives the shape. rows_before: each replica's first row
// among all replicas' rows (the forward pass's).
std::vector<Tensor> column_gradients(const ReplicaContext& ctx, const Tensor& x, const Tensor& kernel, const Tensor& dy,
                                     const std::vector<int64_t>& rows_before, bool kernel_needed, bool bias_needed) {
  const int n = ctx.num_replicas();
  const int64_t k = kernel.dim(0), width = kernel.dim(1);
  const ShardRange cols = shard_range(width, n, ctx.replica_id());
  const int64_t c = cols.size();
  const std::vector<int64_t> splits = column_splits(width, n);
  std::vector<Tensor> out(2);
  Tensor dy_cols;  // every replica's rows of this core's columns
  {
    CategoryScope exchange(Category::workspace);
    dy_cols = ctx.all_to_all(dy, 1, splits);
  }
  if (kernel_needed) {
    Tensor x_all;  // gathered again rather than kept from the forward pass: each core saves its own rows
    Tensor dy_whole;  // where some core's share is a single row or column: every replica's whole dy too
    {
      CategoryScope gathered(Category::workspace);
      x_all = ctx.all_gather(x);
      if (k < 2 || width / n < 2) dy_whole = ctx.all_gather(dy);
    }
    out[0] = Tensor::empty({n, k, c}, Category::workspace, device_context().owner);
    if (detail::compute(out[0], {&x_all, &dy_cols, &dy_whole})) {
      for (int i = 0; i < n; ++i) {  // x_iᵀ · dy_i over replica i's rows: the replicated layer's gradient
        const int64_t r0 = rows_before[static_cast<size_t>(i)], m = rows_before[static_cast<size_t>(i) + 1] - r0;
        if (x.dtype() == DType::float32 && dy.dtype() == DType::float32 && detail::chained_kernel_gradient(k, width, m, n)) {
          const ChainedOperands operands{x_all.data() + r0 * k, k, dy_cols.data() + r0 * c, c, m};
          chained_products({&operands, 1}, 0, k, 0, c, out[0].data() + i * k * c, c, 1);  // as the replicated layer's
        } else if (k >= 2 && c >= 2) {
          detail::gemm_operands(out[0].data() + i * k * c, c, k, c, m, {x_all.data() + r0 * k, k, /*transposed=*/true},
                                {dy_cols.data() + r0 * c, c, false}, /*accumulate=*/false, /*as_if_columns=*/width);
        } else {  // a single row or column: the whole product's bits need every column of dy (dy_whole)
          product_columns(out[0].data() + i * k * c, k, m, {x_all.data() + r0 * k, k, /*transposed=*/true},
                          {dy_whole.data() + r0 * width, width, false}, width, cols);
        }
      }
    }
  }
  if (bias_needed) {
    out[1] = Tensor::empty({n, c}, Category::workspace, device_context().owner);
    if (detail::compute(out[1], {&dy_cols})) {
      for (int i = 0; i < n; ++i) {
        const int64_t r0 = rows_before[static_cast<size_t>(i)], m = rows_before[static_cast<size_t>(i) + 1] - r0;
        detail::column_sums(dy_cols.data() + r0 * c, m, c, c, out[1].data() + i * c);
      }
    }
  }
  return out;
}

// Rounds to bfloat16 in place under a bfloat16 policy (what finish() and widening again give).
void round_if(Tensor& t, DType compute) {
  if (compute != DType::float32 && !t.is_abstract() && t.size() > 0) round_bfloat16(t.data(), t.data(), t.size());
}

// Every replica's rows of xv (gathered; rows_before: each one's first) times this core's columns of
// kv, plus its columns of bv when defined, each step rounded as the replicated layer's matmul and
// bias_add round their outputs (`workspace`).
Tensor columns_for_every_replica(const ReplicaContext& ctx, const Tensor& xv, const Tensor& kv, const Tensor& bv,
                                 ShardRange cols, std::vector<int64_t>& rows_before, DType compute) {
  const CategoryScope scratch(Category::workspace);
  const Tensor x_all = ctx.all_gather(xv, &rows_before);
  Tensor mine = Tensor::empty({x_all.dim(0), cols.size()});
  detail::count_forward_flops(2 * x_all.dim(0) * xv.dim(1) * cols.size());
  if (!detail::compute(mine, {&x_all, &kv})) return mine;
  multiply_columns(x_all, rows_before, kv, cols, mine);
  round_if(mine, compute);
  if (bv.defined() && cols.size() > 0) {
    const Eigen::Map<const Eigen::RowVectorXf> b(bv.data() + cols.begin, cols.size());
    MatrixMap(mine.data(), mine.dim(0), cols.size()).rowwise() += b;
    round_if(mine, compute);
  }
  return mine;
}

}  // namespace

Tensor column_parallel_matmul(const Tensor& x, const Tensor& kernel, const Tensor& bias) {
  ReplicaContext* ctx = current_replica_context();
  if (ctx == nullptr || !ctx->has_collectives()) throw std::logic_error("column_parallel_matmul runs inside strategy.run");
  if (x.rank() != 2 || kernel.rank() != 2 || x.dim(1) != kernel.dim(0) ||
      (bias.defined() && (bias.rank() != 1 || bias.dim(0) != kernel.dim(1)))) {
    detail::shape_error("column_parallel_matmul", "cannot multiply " + shape_string(x.shape()) + " by " +
                                                      shape_string(kernel.shape()) + " and add " +
                                                      (bias.defined() ? shape_string(bias.shape()) : std::string("no bias")));
  }
  // Mixed precision as the replicated matmul and bias_add: operands rounded to bfloat16, float32
  // products, each output rounded; x kept as they keep it.
  const DType dt = compute_dtype();
  const detail::Operand xo = detail::operand(x, dt);
  const ShardRange cols = shard_range(kernel.dim(1), ctx->num_replicas(), ctx->replica_id());
  std::vector<int64_t> rows_before;
  Tensor mine = columns_for_every_replica(*ctx, xo.value, detail::compute_values(kernel, dt),
                                          bias.defined() ? detail::compute_values(bias, dt) : Tensor(), cols, rows_before, dt);
  std::vector<int64_t> row_splits;
  for (size_t i = 0; i + 1 < rows_before.size(); ++i) row_splits.push_back(rows_before[i + 1] - rows_before[i]);
  Tensor y;
  {
    std::optional<CategoryScope> widened;  // under bfloat16 the float32 exchange is a temporary
    if (dt != DType::float32) widened.emplace(Category::workspace);
    y = ctx->all_to_all(mine, 0, row_splits);
  }
  mine = Tensor();
  y = detail::finish(y, dt);
  const bool recording = bias.defined() ? GradientTape::is_recording({&x, &kernel, &bias}) : GradientTape::is_recording({&x, &kernel});
  if (recording) {
    std::vector<Tensor> inputs{x, kernel};
    if (bias.defined()) inputs.push_back(bias);
    GradientTape::record(inputs, {y}, [x_kept = xo.kept, x_shape = x.shape(), kernel, rows_before, dt, owner = device_context().owner](
                                          const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
      const ReplicaContext* ctx = current_replica_context();
      if (ctx == nullptr || !ctx->has_collectives()) throw std::logic_error("a column-parallel layer's backward runs inside strategy.run");
      std::vector<Tensor> grads(needs.size());
      if (needs[0]) {  // dx = dy · kernelᵀ, with the whole kernel, as the replicated layer
        const GatheredKernel whole(*ctx, kernel, owner);
        const Tensor kv = detail::compute_values(kernel, dt);
        grads[0] = Tensor::empty(x_shape);
        if (detail::compute(grads[0], {&dy[0]})) detail::gemm(grads[0].matrix(), dy[0].matrix(), kv.matrix().transpose());
      }
      const bool bias_needed = needs.size() > 2 && needs[2];
      if (needs[1] || bias_needed) {
        const Tensor xv = detail::compute_values(x_kept, dt);
        std::vector<Tensor> stacks = column_gradients(*ctx, xv, kernel, dy[0], rows_before, needs[1], bias_needed);
        if (needs[1]) grads[1] = std::move(stacks[0]);
        if (bias_needed) grads[2] = std::move(stacks[1]);
      }
      return grads;
    });
  }
  return y;
}

}  // namespace keel::ops
