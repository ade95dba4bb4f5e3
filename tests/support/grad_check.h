// Test support for ops: one generic gradient checker (central differences against the tape's
// gradients) and one generic planning check (an abstract run charges what the real run charges).
//
//   expect_gradients_match([](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1]); },
//                          {a, b}, {.atol = 1e-4, .rtol = 1e-3});
//
// Both report through GoogleTest (non-fatal failures), naming the input and element at fault.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "framework/core/tensor.h"

namespace keel::testing {

using TensorFn = std::function<Tensor(const std::vector<Tensor>&)>;

struct GradCheckOptions {
  // Central-difference step for element x: h = eps * max(1, |x|). float32 arithmetic: 1e-2..1e-3.
  double eps = 1e-2;
  // An element passes when |analytic - numeric| <= atol + rtol * max(|analytic|, |numeric|).
  double atol = 1e-3;
  double rtol = 1e-2;
  // Which inputs to differentiate (by index); empty: all. The others are passed to f but not watched
  // (labels, for ops whose gradient flows to the predictions only).
  std::vector<int> check_inputs;
  // Seed of the fixed random weighting that reduces a non-scalar output to a scalar.
  uint64_t seed = 0x5eed;
  // Prefix for failure messages (the op under test).
  std::string name;
};

// Per-op tolerances, spelled compactly: tolerances("softmax", 1e-3, 1e-4, 1e-2).
GradCheckOptions tolerances(std::string name, double eps, double atol, double rtol);

// f returns a tensor of any shape; it is reduced to a scalar as sum_k w_k * f_k with fixed random
// weights w_k in ±[0.5, 1.5), so every output element matters. `inputs` are host tensors (copied
// here; the caller's are never modified). Checks, for every checked input:
//   - the analytic gradient (GradientTape watching each input) is defined and has the input's shape;
//   - it matches the central difference (f evaluated in float, differenced in double) per element,
//     the worst element being reported with its index;
//   - the analytic pass did not modify the inputs;
// and that gradient() w.r.t. a watched tensor the output does not depend on is undefined.
void expect_gradients_match(TensorFn f, std::vector<Tensor> inputs, GradCheckOptions opts = {});

// Runs f (forward, then reduce_sum and GradientTape::gradient w.r.t. every input) twice, each on a
// fresh one-core Ledger with no budget: once on real tensors and once in an abstract (planning)
// context. Expects the abstract run's outputs and gradients to be abstract with the real run's
// shapes (and the same gradients defined), and every ledger category's statistics (current, peak,
// allocated, freed, counts) to be identical after the forward and after the backward.
void expect_abstract_matches_real(TensorFn f, const std::vector<Tensor>& inputs);

// Host tensor helpers.
Tensor host(const Shape& shape, std::vector<float> values);
// Deterministic pseudo-random values in [lo, hi).
Tensor random_host(const Shape& shape, float lo, float hi, uint64_t seed);
// Like random_host, but every |value| >= min_abs (for ops with kinks at 0, e.g. ReLU).
Tensor random_host_away_from_zero(const Shape& shape, float min_abs, float max_abs, uint64_t seed);

// "(1, 2)": the multi-index of flat element `flat` in a row-major tensor of `shape`.
std::string index_string(const Shape& shape, int64_t flat);

}  // namespace keel::testing
