// zero_pad2d (framework/ops/zero_pad.cc): values by hand, gradients against central differences, the
// TensorFlow SAME padding it reproduces before a VALID convolution, abstract-vs-real ledger equality,
// bad arguments.
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/ops/conv.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using ops::Padding;
using testing::expect_abstract_matches_real;
using testing::expect_gradients_match;
using testing::host;
using testing::random_host;

TEST(ZeroPad2dTest, ForwardByHand) {
  // 1x2x2x1 [1 2; 3 4] padded top 1, bottom 0, left 2, right 1 -> 3x5.
  Tensor y = ops::zero_pad2d(host({1, 2, 2, 1}, {1, 2, 3, 4}), {1, 0, 2, 1});
  EXPECT_EQ(y.shape(), (Shape{1, 3, 5, 1}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{0, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 3, 4, 0}));
  // Channels stay together.
  Tensor z = ops::zero_pad2d(host({1, 1, 1, 2}, {5, 6}), {0, 1, 1, 0});
  EXPECT_EQ(z.shape(), (Shape{1, 2, 2, 2}));
  EXPECT_EQ(z.to_vector(), (std::vector<float>{0, 0, 5, 6, 0, 0, 0, 0}));
  EXPECT_EQ(ops::zero_pad2d_output_shape({-1, 3, 4, 5}, {1, 2, 3, 4}), (Shape{-1, 6, 11, 5}));
}

TEST(ZeroPad2dTest, GradientCropsAndMatchesCentralDifferences) {
  expect_gradients_match([](const std::vector<Tensor>& in) { return ops::zero_pad2d(in[0], {2, 1, 0, 3}); },
                         {random_host({2, 3, 2, 3}, -1, 1, 40)}, testing::tolerances("zero_pad2d", 1e-2, 1e-4, 1e-3));
  // Padding then a VALID conv equals a SAME conv when the pads are TensorFlow's.
  Tensor x = random_host({1, 6, 6, 2}, -1, 1, 41), k = random_host({3, 3, 2, 2}, -1, 1, 42);
  const std::vector<float> same = ops::conv2d(x, k, {2, 2}, Padding::same).to_vector();
  const std::vector<float> padded = ops::conv2d(ops::zero_pad2d(x, {0, 1, 0, 1}), k, {2, 2}, Padding::valid).to_vector();
  ASSERT_EQ(same.size(), padded.size());
  for (size_t i = 0; i < same.size(); ++i) EXPECT_FLOAT_EQ(same[i], padded[i]) << i;
}

TEST(ZeroPad2dTest, AbstractRunChargesLikeRealRun) {
  expect_abstract_matches_real([](const std::vector<Tensor>& in) { return ops::zero_pad2d(in[0], {1, 2, 3, 0}); },
                               {random_host({2, 3, 4, 2}, -1, 1, 43)});
}

TEST(ZeroPad2dTest, ErrorsThrowInvalidArgument) {
  EXPECT_THROW(ops::zero_pad2d(Tensor::zeros({3, 4, 2}), {1, 1, 1, 1}), std::invalid_argument);
  EXPECT_THROW(ops::zero_pad2d(Tensor::zeros({1, 3, 4, 2}), {1, -1, 1, 1}), std::invalid_argument);
}

}  // namespace
}  // namespace keel
