// Test support for conv2d (framework/ops/conv.h) against the textbook formula: y, dx and dkernel
// of sum(y * dy) by direct loops in double, and checks of conv2d's forward and gradients against
// them on each backend.
//
//   check_against_direct({{2, 7, 6, 3}, {3, 3, 3, 4}, {1, 1}, ops::Padding::valid, {1, 1}}, 100, "config 0");
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "framework/core/shape.h"
#include "framework/core/tensor.h"
#include "framework/ops/conv.h"

namespace keel::testing {

struct ConvConfig {
  Shape x, kernel;
  std::array<int, 2> strides;
  ops::Padding padding;
  std::array<int, 2> dilation;
};

// y, dx and dkernel of sum(y * dy) by the textbook formula, in double.
struct ConvReference {
  std::vector<double> y, dx, dk;
};
ConvReference direct_conv(const std::vector<float>& x, const std::vector<float>& k, const std::vector<float>& dy,
                          const ConvConfig& c);

// Every element of `got` within tol * (1 + |want|) of `want`.
void expect_near_reference(const Tensor& got, const std::vector<double>& want, double tol, const std::string& what);

// conv2d's y and dx within `tol` of direct_conv's on random inputs from `seed` (dkernel within 10x:
// it sums over every output pixel), on each backend.
void check_against_direct(const ConvConfig& c, uint64_t seed, const std::string& what, double tol = 1e-5);

}  // namespace keel::testing
