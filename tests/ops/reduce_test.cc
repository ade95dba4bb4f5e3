#include <vector>

#include <gtest/gtest.h>

#include "framework/autodiff/tape.h"
#include "framework/ops/ops.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using testing::expect_abstract_matches_real;
using testing::expect_gradients_match;
using testing::host;
using testing::random_host;
using testing::tolerances;

TEST(ReduceTest, SumAndMeanToAScalar) {
  Tensor x = host({2, 3}, {1, 2, 3, 4, 5, -6});
  Tensor s = ops::reduce_sum(x), m = ops::reduce_mean(x);
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(m.shape(), Shape{});
  EXPECT_FLOAT_EQ(s.item(), 9);
  EXPECT_FLOAT_EQ(m.item(), 1.5f);
}

TEST(ReduceTest, SumAccumulatesWithoutLosingSmallTerms) {
  // 1e8 + 1 * 16 in float loses every 1 when summed naively left to right; the result must not.
  std::vector<float> v(17, 1.0f);
  v[0] = 1e8f;
  EXPECT_FLOAT_EQ(ops::reduce_sum(host({17}, v)).item(), 1e8f + 16.0f);
}

TEST(ReduceTest, EmptyInputSumsToZero) {
  Tensor empty = Tensor::from_vector({0, 3}, std::vector<float>{});
  EXPECT_EQ(ops::reduce_sum(empty).item(), 0.0f);
  EXPECT_EQ(ops::reduce_mean(empty).item(), 0.0f);
}

TEST(ReduceTest, GradientsByHand) {
  Tensor x = host({2, 2}, {1, 2, 3, 4});
  GradientTape tape(/*persistent=*/true);
  tape.watch(x);
  Tensor s = ops::reduce_sum(x), m = ops::reduce_mean(x);
  EXPECT_EQ(tape.gradient(s, {x})[0].to_vector(), (std::vector<float>{1, 1, 1, 1}));
  EXPECT_EQ(tape.gradient(m, {x})[0].to_vector(), (std::vector<float>{0.25f, 0.25f, 0.25f, 0.25f}));
}

TEST(ReduceTest, GradientsMatchCentralDifferences) {
  const auto tol = tolerances("reduce", 1e-2, 1e-4, 1e-3);
  expect_gradients_match([](const std::vector<Tensor>& in) { return ops::reduce_sum(in[0]); },
                         {random_host({3, 4}, -1, 1, 101)}, tol);
  expect_gradients_match([](const std::vector<Tensor>& in) { return ops::reduce_mean(in[0]); },
                         {random_host({5}, -1, 1, 102)}, tol);
  // Upstream gradient other than 1: the reduction scales it (reduce feeding a matmul).
  expect_gradients_match(
      [](const std::vector<Tensor>& in) {
        return ops::matmul(ops::reshape(ops::reduce_mean(in[0]), {1, 1}), host({1, 3}, {2, -1, 0.5f}));
      },
      {random_host({2, 3}, -1, 1, 103)}, tol);
}

TEST(ReduceTest, AbstractRunChargesLikeRealRun) {
  expect_abstract_matches_real([](const std::vector<Tensor>& in) { return ops::reduce_mean(ops::relu(in[0])); },
                               {random_host({4, 3}, -1, 1, 104)});
}

}  // namespace
}  // namespace keel
