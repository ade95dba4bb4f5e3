#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "framework/autodiff/tape.h"
#include "framework/core/thread_pool.h"
#include "framework/ops/ops.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using testing::expect_abstract_matches_real;
using testing::expect_gradients_match;
using testing::host;
using testing::random_host;
using testing::tolerances;

// All four ops are linear in their inputs: central differences are exact up to float rounding.
const testing::GradCheckOptions kLinearTol = tolerances("elementwise", 1e-2, 1e-4, 1e-3);

// --- bias_add ---

TEST(BiasAddTest, ForwardAddsBiasToEveryRow) {
  Tensor y = ops::bias_add(host({2, 3}, {1, 2, 3, 4, 5, 6}), host({3}, {10, 20, 30}));
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{11, 22, 33, 14, 25, 36}));
}

TEST(BiasAddTest, ForwardNHWCAddsPerChannel) {
  // (1, 2, 2, 2) NHWC with 2 channels: channel c gets bias[c] at every pixel.
  Tensor y = ops::bias_add(host({1, 2, 2, 2}, {0, 0, 1, 1, 2, 2, 3, 3}), host({2}, {100, -100}));
  EXPECT_EQ(y.shape(), (Shape{1, 2, 2, 2}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{100, -100, 101, -99, 102, -98, 103, -97}));
}

TEST(BiasAddTest, GradientMatchesCentralDifferences) {
  auto f = [](const std::vector<Tensor>& in) { return ops::bias_add(in[0], in[1]); };
  expect_gradients_match(f, {random_host({4, 3}, -1, 1, 11), random_host({3}, -1, 1, 12)}, kLinearTol);
  expect_gradients_match(f, {random_host({2, 2, 3, 2}, -1, 1, 13), random_host({2}, -1, 1, 14)}, kLinearTol);
}

TEST(BiasAddTest, BiasGradientIsColumnSumByHand) {
  Tensor x = host({3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor b = host({2}, {0, 0});
  GradientTape tape;
  tape.watch(b);
  tape.watch(x);
  // loss = sum(bias_add(x, b) · [[1], [2]]): d/db = (3·1, 3·2), d/dx = [1 2] on every row.
  Tensor loss = ops::reduce_sum(ops::matmul(ops::bias_add(x, b), host({2, 1}, {1, 2})));
  std::vector<Tensor> g = tape.gradient(loss, {b, x});
  EXPECT_EQ(g[0].to_vector(), (std::vector<float>{3, 6}));
  EXPECT_EQ(g[1].to_vector(), (std::vector<float>{1, 2, 1, 2, 1, 2}));
}

// The bias's gradient is each column's float sum in row order, whatever the width (whole and partial
// blocks of accumulated columns) and the threads.
TEST(BiasAddTest, BiasGradientIsEachColumnsSumInRowOrderOnAnyThreads) {
  for (int64_t cols : {1, 15, 64, 200, 257, 1030}) {
    const int64_t rows = 300;
    Tensor x = random_host({rows, cols}, -1, 1, 20);
    Tensor b = random_host({cols}, -1, 1, 21);
    Tensor dy = random_host({rows, cols}, -1, 1, 22);
    std::vector<float> want(static_cast<size_t>(cols), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) want[static_cast<size_t>(c)] += dy.data()[r * cols + c];
    }
    for (int threads : {1, 2, 3}) {
      KernelThreadsScope scope(threads);
      GradientTape tape;
      tape.watch(b);
      Tensor y = ops::bias_add(x, b);
      EXPECT_EQ(tape.gradient(y, {b}, nullptr, dy)[0].to_vector(), want) << cols << " columns on " << threads << " threads";
    }
  }
}

TEST(BiasAddTest, ShapeErrorsThrowInvalidArgument) {
  Tensor x = host({2, 3}, std::vector<float>(6, 0));
  EXPECT_THROW(ops::bias_add(x, host({2}, {1, 2})), std::invalid_argument);
  EXPECT_THROW(ops::bias_add(x, host({1, 3}, {1, 2, 3})), std::invalid_argument);
  EXPECT_THROW(ops::bias_add(Tensor::scalar(1), host({1}, {1})), std::invalid_argument);
}

TEST(BiasAddTest, AbstractRunChargesLikeRealRun) {
  expect_abstract_matches_real([](const std::vector<Tensor>& in) { return ops::bias_add(in[0], in[1]); },
                               {random_host({5, 4}, -1, 1, 15), random_host({4}, -1, 1, 16)});
}

// --- add ---

TEST(AddTest, ForwardAndGradient) {
  Tensor y = ops::add(host({2, 2}, {1, 2, 3, 4}), host({2, 2}, {0.5f, -2, 10, 0}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{1.5f, 0, 13, 4}));
  expect_gradients_match([](const std::vector<Tensor>& in) { return ops::add(in[0], in[1]); },
                         {random_host({3, 4}, -1, 1, 21), random_host({3, 4}, -1, 1, 22)}, kLinearTol);
}

TEST(AddTest, TensorAddedToItselfGetsGradientTwo) {
  Tensor x = host({3}, {1, 2, 3});
  GradientTape tape;
  tape.watch(x);
  Tensor loss = ops::reduce_sum(ops::add(x, x));
  EXPECT_FLOAT_EQ(loss.item(), 12);
  std::vector<Tensor> g = tape.gradient(loss, {x});
  EXPECT_EQ(g[0].to_vector(), (std::vector<float>{2, 2, 2}));
}

TEST(AddTest, ShapeMismatchThrowsInvalidArgument) {
  EXPECT_THROW(ops::add(host({2}, {1, 2}), host({3}, {1, 2, 3})), std::invalid_argument);
  // Same element count, different shape: no implicit broadcasting or reshaping.
  EXPECT_THROW(ops::add(host({2, 3}, std::vector<float>(6, 0)), host({3, 2}, std::vector<float>(6, 0))),
               std::invalid_argument);
}

TEST(AddTest, AbstractRunChargesLikeRealRun) {
  expect_abstract_matches_real([](const std::vector<Tensor>& in) { return ops::add(in[0], in[1]); },
                               {random_host({3, 5}, -1, 1, 23), random_host({3, 5}, -1, 1, 24)});
}

// --- scale ---

TEST(ScaleTest, ForwardAndGradient) {
  Tensor y = ops::scale(host({3}, {1, -2, 0.5f}), -3);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{-3, 6, -1.5f}));
  expect_gradients_match([](const std::vector<Tensor>& in) { return ops::scale(in[0], 0.37f); },
                         {random_host({2, 5}, -2, 2, 31)}, kLinearTol);
}

TEST(ScaleTest, AbstractRunChargesLikeRealRun) {
  expect_abstract_matches_real([](const std::vector<Tensor>& in) { return ops::scale(in[0], 2.0f); },
                               {random_host({7}, -1, 1, 32)});
}

// --- reshape ---

TEST(ReshapeTest, ForwardKeepsRowMajorOrderAndResolvesMinusOne) {
  Tensor x = host({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor y = ops::reshape(x, {3, -1});
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(y.to_vector(), x.to_vector());
  EXPECT_EQ(y.data(), x.data()) << "reshape shares storage";
  EXPECT_NE(y.id(), x.id()) << "a view is a new value for the tape";
}

TEST(ReshapeTest, GradientHasTheInputShape) {
  expect_gradients_match(
      [](const std::vector<Tensor>& in) {
        // Reshape then an op that depends on the new layout, so a wrong backward layout would show.
        return ops::matmul(ops::reshape(in[0], {3, 4}), ops::reshape(in[1], {4, 1}));
      },
      {random_host({2, 6}, -1, 1, 41), random_host({2, 2}, -1, 1, 42)}, kLinearTol);
}

TEST(ReshapeTest, IncompatibleShapeThrowsInvalidArgument) {
  Tensor x = host({2, 3}, std::vector<float>(6, 0));
  EXPECT_THROW(ops::reshape(x, {4, 2}), std::invalid_argument);
  EXPECT_THROW(ops::reshape(x, {-1, -1}), std::invalid_argument);
  EXPECT_THROW(ops::reshape(x, {4, -1}), std::invalid_argument);
}

TEST(ReshapeTest, AbstractRunChargesLikeRealRun) {
  expect_abstract_matches_real([](const std::vector<Tensor>& in) { return ops::scale(ops::reshape(in[0], {-1}), 2); },
                               {random_host({2, 3, 2}, -1, 1, 43)});
}

}  // namespace
}  // namespace keel
