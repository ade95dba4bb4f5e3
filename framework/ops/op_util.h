// Shared checks for op implementations.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "framework/autodiff/recompute.h"
#include "framework/core/tensor.h"
#include "framework/core/thread_pool.h"
#include "framework/device/context.h"
#include "framework/device/gradient_placement.h"
#include "framework/device/ledger.h"
#include "framework/device/replica_rows.h"
#include "framework/device/strategy.h"
#include "framework/ops/precision.h"

namespace keel::ops::detail {

// True if the op must compute `out`; abstract outputs (planning) skip the arithmetic.
inline bool compute(const Tensor& out, std::initializer_list<const Tensor*> inputs) {
  // Abstract (planning) or empty: nothing to compute. An empty tensor is never abstract, so an empty
  // output must not go on to check its inputs, which may be.
  if (out.is_abstract() || out.size() == 0) return false;
  for (const Tensor* t : inputs) {
    if (t->defined() && t->is_abstract()) {
      throw std::logic_error("op on an abstract input must run in an abstract (planning) context");
    }
  }
  return true;
}

// What a trainable variable's whole gradient is charged as: `gradients` from the start (not backward
// workspace that later becomes one) — except where the strategy shards gradients (ZeRO-2), where it
// lives only until it is reduce-scattered, a temporary, and the core's `gradients` are its shards.
inline Category variable_gradient_category() {
  const DeviceContext& ctx = device_context();
  const bool sharded = ctx.strategy != nullptr && ctx.strategy->shard() >= ShardingMode::gradients;
  return sharded ? Category::workspace : Category::gradients;
}

// A buffer for the gradient of a tensor of `shape` (variable_gradient_category for a trainable
// variable). A variable's is charged whole on every core in a host program (device/replica_rows.h),
// as each replica holds its own.
inline Tensor grad_buffer(const Shape& shape, bool is_variable) {
  if (!is_variable) return Tensor::empty(shape);
  if (replica_rows() == nullptr) return Tensor::empty(shape, variable_gradient_category(), device_context().owner);
  DeviceContext whole = device_context();
  whole.shard_axis = -1;
  const ContextScope on_every_core(std::move(whole));
  return Tensor::empty(shape, variable_gradient_category(), device_context().owner);
}
inline Tensor grad_buffer(const Tensor& input) { return grad_buffer(input.shape(), input.is_trainable_variable()); }
// What a trainable variable's gradient is placed by (GradientPlacement: its value's storage id),
// taken when the op is recorded; 0 for anything else.
inline uint64_t placement_key(const Tensor& t) {
  return t.defined() && t.is_trainable_variable() && !t.is_abstract() ? t.storage().id() : 0;
}
// A variable's gradient buffer where this replica's GradientPlacement puts it (float32, the size it
// is listed with: its bytes live there, charged as any gradient), else grad_buffer's.
inline Tensor grad_buffer(const Shape& shape, bool is_variable, uint64_t placement) {
  Tensor t = grad_buffer(shape, is_variable);
  if (is_variable && placement != 0 && !t.is_abstract() && t.dtype() == DType::float32) {
    if (float* memory = placed_gradient(placement, t.size())) t.storage().relocate(memory, /*copy=*/false);
  }
  return t;
}

// The multiply-adds of a forward matrix product or convolution (2 FLOPs each), counted on the
// thread's core, as recomputed while remat's second pass runs (CoreLedger::record_flops).
inline void count_forward_flops(int64_t flops) {
  const DeviceContext& ctx = device_context();
  if (ctx.ledger != nullptr && ctx.core >= 0) ctx.ledger->core(ctx.core).record_flops(flops, recomputing());
}

// Mixed precision (ops/precision.h). An op computing in `compute` reads each input through operand():
// `value` is the float32 it computes with (the input itself when nothing changes; otherwise a
// `workspace` temporary, rounded to bfloat16 under bfloat16), `kept` what its backward closure keeps
// (the input, or a float32 activation's bfloat16 copy). In backward, compute_values(kept, compute)
// gives the same values again. Outputs are computed into output_buffer() (a `workspace` temporary
// under bfloat16) and finish() makes them the op's result (its bfloat16 rounding).
struct Operand {
  Tensor kept;
  Tensor value;
};
Operand operand(const Tensor& x, DType compute);
Tensor compute_values(const Tensor& kept, DType compute);
Tensor output_buffer(const Shape& shape, DType compute);
Tensor finish(const Tensor& y, DType compute);

// Element access for kernels templated on how a tensor is stored: float32, or bfloat16's bits
// (widened exactly on load, rounded to nearest even on store).
inline float load(const float* p, int64_t i) { return p[i]; }
inline float load(const uint16_t* p, int64_t i) { return bfloat16_to_float(p[i]); }
inline void store(float* p, int64_t i, float v) { p[i] = v; }
inline void store(uint16_t* p, int64_t i, float v) { p[i] = bfloat16_bits(v); }

// out = f(in) on bfloat16 arrays, in chunks widened into a float32 buffer on the stack (no
// allocation): f gets an ArrayMap of up to 1024 values and updates it in place.
template <typename F>
void map_bfloat16(const uint16_t* in, uint16_t* out, int64_t n, F f) {
  constexpr int64_t kChunk = 1024;
  float buf[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    from_bfloat16(in + i, buf, m);
    f(ArrayMap(buf, m));
    to_bfloat16(buf, out + i, m);
  }
}

// f(begin, end) over [0, n) in fixed blocks of kElementBlock elements, on the replica's share of the
// threads: for elementwise work, where any split gives the same bits.
inline constexpr int64_t kElementBlock = int64_t{1} << 15;
template <typename F>
void for_element_blocks(int64_t n, F&& f) {
  parallel_for(
      (n + kElementBlock - 1) / kElementBlock,
      [&](int64_t b) { f(b * kElementBlock, std::min(n, (b + 1) * kElementBlock)); },
      threads_worth(static_cast<double>(n), kMinElementsPerThread));
}

// f(r0, r1) over [0, rows) of `channels`-wide rows, in blocks of whole rows of about kElementBlock
// elements, on the replica's share of the threads: for elementwise work on (rows, C) views.
template <typename F>
void for_row_blocks(int64_t rows, int64_t channels, F&& f) {
  const int64_t block = std::max<int64_t>(1, kElementBlock / std::max<int64_t>(channels, 1));
  parallel_for(
      (rows + block - 1) / block, [&](int64_t b) { f(b * block, std::min(rows, (b + 1) * block)); },
      threads_worth(static_cast<double>(rows) * static_cast<double>(channels), kMinElementsPerThread));
}

// out[c] = x[0][c] + x[1][c] + ... in row order, for c < cols (rows `ld` floats apart): a bias's
// gradient. A column's sum does not depend on the columns beside it, so a column-parallel layer's
// share of it (framework/ops/column_parallel.cc) has the bits of the whole one's. Up to 128 columns
// at a time in local accumulators (8 vectors added side by side, each row's span read in one run):
// one column per cache line at a time was bound by each add waiting for the last, at about a third
// of this speed on ResNet50's shapes.
inline void column_sums(const float* x, int64_t rows, int64_t ld, int64_t cols, float* out) {
  constexpr int64_t kWidth = 128;
  for (int64_t c0 = 0; c0 < cols; c0 += kWidth) {
    const int64_t n = std::min(kWidth, cols - c0);
    float acc[kWidth] = {};
    if (n == kWidth) {
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * ld + c0;
        for (int64_t c = 0; c < kWidth; ++c) acc[c] += row[c];
      }
    } else {
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * ld + c0;
        for (int64_t c = 0; c < n; ++c) acc[c] += row[c];
      }
    }
    std::copy_n(acc, n, out + c0);
  }
}

// column_sums of a (rows, cols) matrix on the replica's threads, in blocks of 16 to 128 columns (two
// or more where cols > 16; the shape decides): each column's sum in row order, so the bits depend
// neither on the threads nor on the blocks.
inline void parallel_column_sums(const float* x, int64_t rows, int64_t cols, float* out) {
  const int64_t width = std::clamp<int64_t>(cols / 2 / 16 * 16, 16, 128);
  parallel_for(
      (cols + width - 1) / width,
      [=](int64_t b) {
        const int64_t c0 = b * width, c1 = std::min(cols, c0 + width);
        column_sums(x + c0, rows, cols, c1 - c0, out + c0);
      },
      threads_worth(static_cast<double>(rows) * static_cast<double>(cols), kMinElementsPerThread));
}

[[noreturn]] inline void shape_error(const std::string& op, const std::string& what) {
  throw std::invalid_argument(op + ": " + what);
}

}  // namespace keel::ops::detail
