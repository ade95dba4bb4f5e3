// concat: forward layout on each axis, gradients against central differences, planning against the
// real run, and shape errors.
#include "framework/ops/concat.h"

#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "framework/autodiff/tape.h"
#include "framework/layers/conv_layers.h"
#include "framework/ops/ops.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using testing::expect_abstract_matches_real;
using testing::expect_gradients_match;
using testing::host;
using testing::random_host;
using testing::tolerances;

TEST(ConcatTest, LastAxisInterleavesRows) {
  Tensor y = ops::concat({host({2, 2}, {1, 2, 3, 4}), host({2, 3}, {10, 11, 12, 13, 14, 15})}, -1);
  EXPECT_EQ(y.shape(), (Shape{2, 5}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{1, 2, 10, 11, 12, 3, 4, 13, 14, 15}));
}

TEST(ConcatTest, FirstAxisAppendsBlocks) {
  Tensor y = ops::concat({host({1, 2}, {1, 2}), host({2, 2}, {3, 4, 5, 6})}, 0);
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST(ConcatTest, MiddleAxisOfARank3Tensor) {
  // (2, 1, 2) ++ (2, 2, 2) on axis 1 (spelled -2): per batch row, a's row then b's two rows.
  Tensor a = host({2, 1, 2}, {1, 2, 3, 4});
  Tensor b = host({2, 2, 2}, {10, 11, 12, 13, 20, 21, 22, 23});
  for (int axis : {1, -2}) {
    Tensor y = ops::concat({a, b}, axis);
    EXPECT_EQ(y.shape(), (Shape{2, 3, 2})) << axis;
    EXPECT_EQ(y.to_vector(), (std::vector<float>{1, 2, 10, 11, 12, 13, 3, 4, 20, 21, 22, 23})) << axis;
  }
}

TEST(ConcatTest, NhwcChannels) {
  Tensor a = random_host({2, 3, 3, 2}, -1, 1, 201), b = random_host({2, 3, 3, 5}, -1, 1, 202);
  Tensor y = ops::concat({a, b}, -1);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 3, 7}));
  const std::vector<float> yv = y.to_vector(), av = a.to_vector(), bv = b.to_vector();
  for (int p = 0; p < 18; ++p) {
    for (int c = 0; c < 2; ++c) EXPECT_EQ(yv[p * 7 + c], av[p * 2 + c]) << p << "," << c;
    for (int c = 0; c < 5; ++c) EXPECT_EQ(yv[p * 7 + 2 + c], bv[p * 5 + c]) << p << "," << c;
  }
}

TEST(ConcatTest, OneInputGivesANewTensorWithTheSameValues) {
  Tensor x = host({2, 2}, {1, 2, 3, 4});
  Tensor y = ops::concat({x}, -1);
  EXPECT_NE(y.id(), x.id());
  EXPECT_NE(y.data(), x.data());
  EXPECT_EQ(y.to_vector(), x.to_vector());
}

TEST(ConcatTest, EmptyInputsTakeNoColumns) {
  Tensor y = ops::concat({Tensor::zeros({2, 0}), host({2, 1}, {7, 8}), Tensor::zeros({2, 0})}, 1);
  EXPECT_EQ(y.shape(), (Shape{2, 1}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{7, 8}));
}

TEST(ConcatTest, GradientsMatchCentralDifferences) {
  expect_gradients_match([](const std::vector<Tensor>& in) { return ops::concat(in, -1); },
                         {random_host({2, 2, 2, 3}, -1, 1, 203), random_host({2, 2, 2, 1}, -1, 1, 204),
                          random_host({2, 2, 2, 2}, -1, 1, 205)},
                         tolerances("concat axis -1", 1e-2, 1e-4, 1e-3));
  expect_gradients_match([](const std::vector<Tensor>& in) { return ops::concat(in, 1); },
                         {random_host({2, 1, 3}, -1, 1, 206), random_host({2, 3, 3}, -1, 1, 207)},
                         tolerances("concat axis 1", 1e-2, 1e-4, 1e-3));
}

TEST(ConcatTest, TheSameTensorTwiceGetsBothSlicesOfTheGradient) {
  // y = [x, x]; d sum(w * y) / dx = w_left + w_right.
  Tensor x = host({2, 2}, {1, 2, 3, 4});
  GradientTape tape;
  tape.watch(x);
  Tensor y = ops::concat({x, x}, -1);
  Tensor w = host({8, 1}, {1, 2, 30, 40, 5, 6, 70, 80});
  Tensor g = tape.gradient(ops::matmul(ops::reshape(y, {1, 8}), w), {x})[0];
  EXPECT_EQ(g.to_vector(), (std::vector<float>{31, 42, 75, 86}));
}

TEST(ConcatTest, OnlyWatchedInputsGetGradients) {
  // Backward is asked for b's gradient only (a is neither watched nor a source).
  Tensor a = host({1, 2}, {1, 2}), b = host({1, 1}, {3});
  GradientTape tape;
  tape.watch(b);
  Tensor y = ops::concat({a, b}, -1);
  Tensor w = host({3, 1}, {5, 6, 7});
  std::vector<Tensor> g = tape.gradient(ops::matmul(y, w), {b});
  ASSERT_TRUE(g[0].defined());
  EXPECT_EQ(g[0].to_vector(), (std::vector<float>{7}));
}

TEST(ConcatTest, AbstractRunChargesLikeRealRun) {
  expect_abstract_matches_real([](const std::vector<Tensor>& in) { return ops::concat(in, -1); },
                               {random_host({2, 3, 3, 2}, -1, 1, 208), random_host({2, 3, 3, 4}, -1, 1, 209)});
}

TEST(ConcatTest, ShapeErrorsThrowInvalidArgument) {
  EXPECT_THROW(ops::concat({}, 0), std::invalid_argument);
  EXPECT_THROW(ops::concat({Tensor::scalar(1), Tensor::scalar(2)}, 0), std::invalid_argument);
  EXPECT_THROW(ops::concat({Tensor::zeros({2, 2}), Tensor::zeros({3, 2})}, 1), std::invalid_argument)
      << "dims off the axis differ";
  EXPECT_THROW(ops::concat({Tensor::zeros({2, 2}), Tensor::zeros({2, 2, 1})}, 1), std::invalid_argument)
      << "ranks differ";
  EXPECT_THROW(ops::concat({Tensor::zeros({2, 2})}, 2), std::invalid_argument);
  EXPECT_THROW(ops::concat({Tensor::zeros({2, 2})}, -3), std::invalid_argument);
}

// Keras's Concatenate asks the op's shape rule (one rule per op).
TEST(ConcatShapeRuleTest, TheLayerAndTheOpAgree) {
  EXPECT_EQ(ops::concat_output_shape({{2, 4, 4, 3}, {2, 4, 4, 5}}, -1), (Shape{2, 4, 4, 8}));
  EXPECT_EQ(Concatenate()->compute_output_shape_multi({{4, 4, 3}, {4, 4, 5}}), (Shape{4, 4, 8}));
  EXPECT_EQ(Concatenate(1)->compute_output_shape_multi({{4, 4, 3}, {2, 4, 3}}), (Shape{6, 4, 3}));
  EXPECT_THROW(ops::concat_output_shape({{2, 4}, {3, 4}}, 1), std::invalid_argument);
  EXPECT_THROW(Concatenate()->compute_output_shape_multi({{4, 4, 3}, {4, 5, 3}}), std::invalid_argument);
  EXPECT_THROW(Concatenate(0)->compute_output_shape_multi({{4, 3}, {4, 3}}), std::invalid_argument) << "the batch axis";
}

}  // namespace
}  // namespace keel
