// Shared checks for op implementations.
#pragma once

#include <initializer_list>
#include <stdexcept>
#include <string>

#include "framework/autodiff/recompute.h"
#include "framework/core/tensor.h"
#include "framework/device/context.h"
#include "framework/device/ledger.h"
#include "framework/device/strategy.h"

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

// A buffer for the gradient of `input` (variable_gradient_category for a trainable variable).
inline Tensor grad_buffer(const Tensor& input) {
  if (input.is_trainable_variable()) return Tensor::empty(input.shape(), variable_gradient_category(), device_context().owner);
  return Tensor::empty(input.shape());
}
inline Tensor grad_buffer(const Shape& shape, bool is_variable) {
  if (is_variable) return Tensor::empty(shape, variable_gradient_category(), device_context().owner);
  return Tensor::empty(shape);
}

// The multiply-adds of a forward matrix product or convolution (2 FLOPs each), counted on the
// thread's core, as recomputed while remat's second pass runs (CoreLedger::record_flops).
inline void count_forward_flops(int64_t flops) {
  const DeviceContext& ctx = device_context();
  if (ctx.ledger != nullptr && ctx.core >= 0) ctx.ledger->core(ctx.core).record_flops(flops, recomputing());
}

[[noreturn]] inline void shape_error(const std::string& op, const std::string& what) {
  throw std::invalid_argument(op + ": " + what);
}

}  // namespace keel::ops::detail
