// 3x3 "same" convolutions on 2x2 maps (framework/ops/conv_two_by_two.h): the taps' own products
// against direct loops and central differences, on both backends and across blocks of images, the
// same bits on 1 to 4 threads, and no workspace: what planning charges is what a run charges.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/core/dtype.h"
#include "framework/ops/conv.h"
#include "framework/ops/conv_geometry.h"
#include "framework/ops/precision.h"
#include "tests/support/conv_backend.h"
#include "tests/support/conv_reference.h"
#include "tests/support/grad_check.h"
#include "tests/support/thread_checks.h"

namespace keel {
namespace {

using ops::Padding;
using testing::ConvConfig;
using testing::random_host;

TEST(Conv2dTwoByTwoTest, IsAThreeByThreeStrideOneSameConvolutionOnTwoByTwoMaps) {
  EXPECT_TRUE(testing::same_geometry({4, 2, 2, 8}, {3, 3, 8, 8}).two_by_two());
  EXPECT_FALSE(testing::same_geometry({4, 2, 3, 8}, {3, 3, 8, 8}).two_by_two());  // 2x3
  EXPECT_FALSE(testing::same_geometry({4, 4, 4, 8}, {3, 3, 8, 8}).two_by_two());
  EXPECT_FALSE(testing::same_geometry({4, 2, 2, 8}, {3, 3, 8, 8}, 2).two_by_two());  // strided: 1x1 out
  EXPECT_FALSE(testing::same_geometry({4, 2, 2, 8}, {2, 2, 8, 8}).two_by_two());
  EXPECT_FALSE(testing::same_geometry({4, 1, 1, 8}, {3, 3, 8, 8}).two_by_two());  // single tap
}

// Odd channel counts, one image, and batches across blocks of 32 images (one short); a dilated one
// and a valid one are not two-by-two (the im2col path, checked beside them).
TEST(Conv2dTwoByTwoTest, MatchesDirectLoops) {
  const std::vector<ConvConfig> configs = {
      {{1, 2, 2, 5}, {3, 3, 5, 7}, {1, 1}, Padding::same, {1, 1}},
      {{3, 2, 2, 16}, {3, 3, 16, 8}, {1, 1}, Padding::same, {1, 1}},
      {{70, 2, 2, 12}, {3, 3, 12, 20}, {1, 1}, Padding::same, {1, 1}},
      {{64, 2, 2, 32}, {3, 3, 32, 32}, {1, 1}, Padding::same, {1, 1}},  // 256 output pixels: not oneDNN's
      {{2, 2, 2, 4}, {3, 3, 4, 3}, {1, 1}, Padding::same, {2, 2}},
      {{2, 4, 4, 4}, {3, 3, 4, 3}, {1, 1}, Padding::valid, {1, 1}},
  };
  for (size_t i = 0; i < configs.size(); ++i) testing::check_against_direct(configs[i], 700 + 10 * i, "2x2 " + std::to_string(i));
}

TEST(Conv2dTwoByTwoTest, GradientsMatchCentralDifferences) {
  const ConvConfig c{{3, 2, 2, 3}, {3, 3, 3, 2}, {1, 1}, Padding::same, {1, 1}};
  auto f = [c](const std::vector<Tensor>& in) { return ops::conv2d(in[0], in[1], c.strides, c.padding, c.dilation); };
  testing::expect_gradients_match(f, {random_host(c.x, -1, 1, 41), random_host(c.kernel, -1, 1, 42)},
                                  testing::tolerances("conv2d 2x2", 1e-2, 1e-4, 1e-3));
}

// Tasks of output (input) columns by blocks of images and one per tap: the shape decides them, in
// float32 and under bfloat16 (where this x, kept as a bfloat16 copy, goes to im2col instead).
TEST(Conv2dTwoByTwoTest, TheSameBitsOnOneToFourThreads) {
  const Tensor x = random_host({40, 2, 2, 64}, -1, 1, 51), k = random_host({3, 3, 64, 48}, -1, 1, 52);
  const Tensor dy = random_host({40, 2, 2, 48}, -1, 1, 53);
  for (DType dt : {DType::float32, DType::bfloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    const ops::ComputeDTypeScope compute(dt);
    testing::expect_same_bits_on_threads([&] {
      std::vector<Tensor> got = testing::conv_gradients(x, k, dy, {1, 1}, Padding::same, {1, 1});
      got.push_back(ops::conv2d(x, k, {1, 1}, Padding::same, {1, 1}));
      return got;
    });
  }
}

// Under bfloat16 a float32 variable x is not rounded into a bfloat16 copy, so the convolution stays
// here, on the rounded kernel and dy: the gradients of the float32 convolution of rounded operands,
// bit for bit, and y that convolution's rounding (one bfloat16 step at most).
TEST(Conv2dTwoByTwoTest, UnderBfloat16AVariableInputIsTheConvolutionOfRoundedOperands) {
  Tensor x = random_host({6, 2, 2, 24}, -1, 1, 71).to(DType::bfloat16).to(DType::float32);
  x.mark_trainable_variable(true);
  const Tensor k = random_host({3, 3, 24, 16}, -1, 1, 72).to(DType::bfloat16).to(DType::float32);
  const Tensor dy = random_host({6, 2, 2, 16}, -1, 1, 73).to(DType::bfloat16).to(DType::float32);
  std::vector<Tensor> got;
  Tensor y;
  {
    const ops::ComputeDTypeScope compute(DType::bfloat16);
    got = testing::conv_gradients(x, k, dy, {1, 1}, Padding::same, {1, 1});
    y = ops::conv2d(x, k, {1, 1}, Padding::same);
  }
  const std::vector<Tensor> want = testing::conv_gradients(x, k, dy, {1, 1}, Padding::same, {1, 1});
  EXPECT_EQ(got[0].to_vector(), want[0].to_vector()) << "dx";
  EXPECT_EQ(got[1].to_vector(), want[1].to_vector()) << "dkernel";
  const std::vector<float> y16 = y.to(DType::float32).to_vector();
  const std::vector<float> y32 = ops::conv2d(x, k, {1, 1}, Padding::same).to_vector();
  ASSERT_EQ(y16.size(), y32.size());
  for (size_t i = 0; i < y32.size(); ++i) {
    ASSERT_LE(std::fabs(y16[i] - y32[i]), std::max(std::ldexp(std::fabs(y32[i]), -7), 1e-6f)) << "y[" << i << "]";
  }
}

TEST(Conv2dTwoByTwoTest, AbstractRunChargesLikeRealRun) {
  for (const Shape& x : {Shape{5, 2, 2, 8}, Shape{64, 2, 2, 16}}) {
    testing::expect_abstract_matches_real(
        [](const std::vector<Tensor>& in) { return ops::conv2d(in[0], in[1], {1, 1}, Padding::same); },
        {random_host(x, -1, 1, 61), random_host({3, 3, x[3], 6}, -1, 1, 62)});
  }
}

}  // namespace
}  // namespace keel
