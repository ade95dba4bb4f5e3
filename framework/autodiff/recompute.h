// Rematerialisation (Keras's RematScope, torch.utils.checkpoint): a segment of the forward pass that
// saves nothing for backward but its input. Its forward runs with no tape recording, so the tensors
// inside it are freed as soon as the segment has used them; backward runs the segment again, this
// time recording on a tape of its own, and differentiates that. Kernels are deterministic, random
// ops draw from streams keyed by (seed, step, replica, op) and layers with side effects skip them
// while recomputing() (BatchNormalization's moving statistics are updated by the first pass only),
// so the recomputed values, and every gradient, are bit-identical to a pass without remat.
#pragma once

#include <functional>
#include <vector>

#include "framework/autodiff/variable.h"
#include "framework/core/tensor.h"

namespace keel {

using SegmentFn = std::function<Tensor(const Tensor& input)>;

// y = fn(x), recorded as one op whose inputs are x and the values of `variables` (every trainable
// variable fn reads: their gradients come from the recomputation). Where no tape depends on them,
// simply fn(x).
Tensor recompute_in_backward(const SegmentFn& fn, const Tensor& x, const std::vector<Variable*>& variables);

// True on this thread while a segment runs again in backward.
bool recomputing();

}  // namespace keel
