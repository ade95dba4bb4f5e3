#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "framework/autodiff/tape.h"
#include "framework/ops/ops.h"
#include "tests/support/grad_check.h"
#include "tests/support/thread_checks.h"

namespace keel {
namespace {

using testing::expect_abstract_matches_real;
using testing::expect_gradients_match;
using testing::host;
using testing::random_host;

// matmul is bilinear: central differences are exact up to rounding, so the tolerance is tight.
const testing::GradCheckOptions kMatmulTol = testing::tolerances("matmul", 1e-2, 1e-4, 1e-3);

TEST(MatmulTest, ForwardMatchesHandComputation) {
  // [[1 2 3]    [[ 7  8]     [[1*7+2*9+3*11  1*8+2*10+3*12]   [[ 58  64]
  //  [4 5 6]] x  [ 9 10]  =   [4*7+5*9+6*11  4*8+5*10+6*12]] = [139 154]]
  //              [11 12]]
  Tensor a = host({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = host({3, 2}, {7, 8, 9, 10, 11, 12});
  Tensor y = ops::matmul(a, b);
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{58, 64, 139, 154}));
}

TEST(MatmulTest, ForwardNonSquareAndVectorShapes) {
  // (1, 2) x (2, 3) -> (1, 3)
  Tensor y = ops::matmul(host({1, 2}, {2, -1}), host({2, 3}, {1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(y.shape(), (Shape{1, 3}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{2 - 4, 4 - 5, 6 - 6}));
  // (3, 1) x (1, 2): an outer product.
  Tensor z = ops::matmul(host({3, 1}, {1, 2, 3}), host({1, 2}, {10, -1}));
  EXPECT_EQ(z.to_vector(), (std::vector<float>{10, -1, 20, -2, 30, -3}));
}

TEST(MatmulTest, GradientOfBothInputsMatchesCentralDifferences) {
  expect_gradients_match([](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1]); },
                         {random_host({3, 4}, -1, 1, 1), random_host({4, 5}, -1, 1, 2)}, kMatmulTol);
}

TEST(MatmulTest, GradientOfEachInputAlone) {
  Tensor a = random_host({2, 3}, -2, 2, 3), b = random_host({3, 2}, -2, 2, 4);
  auto f = [](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1]); };
  auto opts = kMatmulTol;
  opts.check_inputs = {0};
  expect_gradients_match(f, {a, b}, opts);
  opts.check_inputs = {1};
  expect_gradients_match(f, {a, b}, opts);
}

TEST(MatmulTest, GradientWhenBothOperandsAreTheSameTensor) {
  // y = x·x: both backward results flow into x and must be summed.
  expect_gradients_match([](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[0]); },
                         {random_host({3, 3}, -1, 1, 5)}, kMatmulTol);
}

TEST(MatmulTest, BackwardValuesByHand) {
  // loss = sum(a·b): d/da = 1·bᵀ (row sums of b), d/db = aᵀ·1 (column sums of a).
  Tensor a = host({2, 2}, {1, 2, 3, 4});
  Tensor b = host({2, 3}, {1, 0, -1, 2, 5, 1});
  GradientTape tape;
  tape.watch(a);
  tape.watch(b);
  Tensor loss = ops::reduce_sum(ops::matmul(a, b));
  std::vector<Tensor> g = tape.gradient(loss, {a, b});
  EXPECT_EQ(g[0].to_vector(), (std::vector<float>{0, 8, 0, 8}));
  EXPECT_EQ(g[1].to_vector(), (std::vector<float>{4, 4, 4, 6, 6, 6}));
}

TEST(MatmulTest, ShapeErrorsThrowInvalidArgument) {
  Tensor a = host({2, 3}, std::vector<float>(6, 1));
  EXPECT_THROW(ops::matmul(a, host({2, 3}, std::vector<float>(6, 1))), std::invalid_argument);  // inner dims
  EXPECT_THROW(ops::matmul(a, host({3}, std::vector<float>(3, 1))), std::invalid_argument);     // rank 1
  EXPECT_THROW(ops::matmul(host({2, 3, 1}, std::vector<float>(6, 1)), host({1, 2}, {1, 1})), std::invalid_argument);
  EXPECT_THROW(ops::matmul(Tensor::scalar(1), Tensor::scalar(2)), std::invalid_argument);
}

TEST(MatmulTest, AbstractRunChargesLikeRealRun) {
  expect_abstract_matches_real([](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1]); },
                               {random_host({4, 6}, -1, 1, 6), random_host({6, 3}, -1, 1, 7)});
}

// Forward and both gradients of a Dense-sized product on 1 to 4 threads: the same bits.
TEST(MatmulTest, TheSameBitsOnOneToFourThreads) {
  const Tensor a = testing::random_host({256, 784}, -1, 1, 11), b = testing::random_host({784, 512}, -1, 1, 12);
  testing::expect_same_bits_on_threads([&] {
    GradientTape tape;
    tape.watch(a);
    tape.watch(b);
    const Tensor y = ops::matmul(a, b);
    std::vector<Tensor> got = tape.gradient(ops::reduce_sum(ops::relu(y)), {a, b});
    got.push_back(y);
    return got;
  });
}

}  // namespace
}  // namespace keel
