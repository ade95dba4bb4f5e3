// Shared checks for op implementations.
#pragma once

#include <initializer_list>
#include <stdexcept>
#include <string>

#include "framework/core/tensor.h"
#include "framework/device/context.h"

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

// A buffer for the gradient of `input`: a trainable variable's gradient is charged as `gradients`
// from the start (not as backward workspace that later becomes one).
inline Tensor grad_buffer(const Tensor& input) {
  if (input.is_trainable_variable()) return Tensor::empty(input.shape(), Category::gradients, device_context().owner);
  return Tensor::empty(input.shape());
}
inline Tensor grad_buffer(const Shape& shape, bool is_variable) {
  if (is_variable) return Tensor::empty(shape, Category::gradients, device_context().owner);
  return Tensor::empty(shape);
}

[[noreturn]] inline void shape_error(const std::string& op, const std::string& what) {
  throw std::invalid_argument(op + ": " + what);
}

}  // namespace keel::ops::detail
