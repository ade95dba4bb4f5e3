#include <cmath>
#include <stdexcept>
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
using testing::random_host_away_from_zero;
using testing::tolerances;

// --- relu ---

TEST(ReluTest, ForwardClampsNegativesToZero) {
  Tensor y = ops::relu(host({2, 3}, {-2, -0.5f, 0, 0.5f, 3, -1e-6f}));
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{0, 0, 0, 0.5f, 3, 0}));
}

TEST(ReluTest, GradientAwayFromTheKinkMatchesCentralDifferences) {
  // Every |x| >= 0.1 and the step is at most 1e-2 * max(1, |x|) < 0.1 for |x| < 10: no central
  // difference straddles 0, where relu has no derivative.
  expect_gradients_match([](const std::vector<Tensor>& in) { return ops::relu(in[0]); },
                         {random_host_away_from_zero({4, 5}, 0.1f, 3.0f, 51)}, tolerances("relu", 1e-2, 1e-4, 1e-3));
}

TEST(ReluTest, GradientThroughAChainMatchesCentralDifferences) {
  // relu(x·w + b): the pre-activations are kept away from 0 by choosing x and w, then checked.
  Tensor x = random_host({3, 4}, -1, 1, 52), w = random_host({4, 5}, -1, 1, 53), b = random_host({5}, -1, 1, 54);
  Tensor pre = ops::bias_add(ops::matmul(x, w), b);
  for (float v : pre.to_vector()) ASSERT_GT(std::fabs(v), 0.02f) << "test data sits too close to relu's kink";
  expect_gradients_match(
      [](const std::vector<Tensor>& in) { return ops::relu(ops::bias_add(ops::matmul(in[0], in[1]), in[2])); },
      {x, w, b}, tolerances("relu chain", 1e-3, 1e-4, 1e-2));
}

TEST(ReluTest, DerivativeAtExactlyZeroIsZero) {
  Tensor x = host({4}, {0.0f, -0.0f, 2.0f, -2.0f});
  GradientTape tape;
  tape.watch(x);
  Tensor loss = ops::reduce_sum(ops::relu(x));
  std::vector<Tensor> g = tape.gradient(loss, {x});
  EXPECT_EQ(g[0].to_vector(), (std::vector<float>{0, 0, 1, 0}));
}

TEST(ReluTest, AbstractRunChargesLikeRealRun) {
  expect_abstract_matches_real([](const std::vector<Tensor>& in) { return ops::relu(in[0]); },
                               {random_host({3, 4}, -1, 1, 55)});
}

// --- softmax ---

std::vector<double> softmax_by_hand(const std::vector<double>& z) {
  double m = z[0];
  for (double v : z) m = std::max(m, v);
  double s = 0;
  for (double v : z) s += std::exp(v - m);
  std::vector<double> p;
  for (double v : z) p.push_back(std::exp(v - m) / s);
  return p;
}

TEST(SoftmaxTest, ForwardMatchesHandComputation) {
  Tensor y = ops::softmax(host({2, 3}, {1, 2, 3, -1, 0, 0.5f}));
  ASSERT_EQ(y.shape(), (Shape{2, 3}));
  const std::vector<float> got = y.to_vector();
  const std::vector<double> r0 = softmax_by_hand({1, 2, 3}), r1 = softmax_by_hand({-1, 0, 0.5});
  for (int j = 0; j < 3; ++j) {
    EXPECT_NEAR(got[j], r0[j], 1e-6) << j;
    EXPECT_NEAR(got[3 + j], r1[j], 1e-6) << j;
  }
}

TEST(SoftmaxTest, RowsSumToOne) {
  Tensor y = ops::softmax(random_host({6, 10}, -5, 5, 61));
  const std::vector<float> v = y.to_vector();
  for (int i = 0; i < 6; ++i) {
    double s = 0;
    for (int j = 0; j < 10; ++j) {
      EXPECT_GT(v[i * 10 + j], 0.0f);
      s += v[i * 10 + j];
    }
    EXPECT_NEAR(s, 1.0, 1e-6) << "row " << i;
  }
}

TEST(SoftmaxTest, StableForLargeLogits) {
  // exp(1e4) overflows float; a max-subtracted softmax is unaffected by a shift of every logit.
  Tensor big = ops::softmax(host({2, 3}, {1e4f, 1e4f - 1, 1e4f - 2, -1e4f, -1e4f + 1, -1e4f + 2}));
  Tensor small = ops::softmax(host({2, 3}, {0, -1, -2, 0, 1, 2}));
  const std::vector<float> b = big.to_vector(), s = small.to_vector();
  for (size_t i = 0; i < b.size(); ++i) {
    ASSERT_TRUE(std::isfinite(b[i])) << i;
    EXPECT_NEAR(b[i], s[i], 1e-6) << i;
  }
  // A huge gap: the winner takes all, the rest are exactly 0, nothing is NaN.
  EXPECT_EQ(ops::softmax(host({1, 2}, {1e4f, -1e4f})).to_vector(), (std::vector<float>{1, 0}));
}

TEST(SoftmaxTest, ActsOnTheLastAxisOfHigherRankInputs) {
  Tensor y = ops::softmax(host({2, 1, 2}, {0, 0, 0, std::log(3.0f)}));
  EXPECT_EQ(y.shape(), (Shape{2, 1, 2}));
  const std::vector<float> v = y.to_vector();
  EXPECT_NEAR(v[0], 0.5, 1e-6);
  EXPECT_NEAR(v[1], 0.5, 1e-6);
  EXPECT_NEAR(v[2], 0.25, 1e-6);
  EXPECT_NEAR(v[3], 0.75, 1e-6);
}

TEST(SoftmaxTest, GradientMatchesCentralDifferences) {
  expect_gradients_match([](const std::vector<Tensor>& in) { return ops::softmax(in[0]); },
                         {random_host({3, 5}, -2, 2, 62)}, tolerances("softmax", 1e-3, 1e-5, 1e-2));
}

TEST(SoftmaxTest, ScalarInputThrowsInvalidArgument) {
  EXPECT_THROW(ops::softmax(Tensor::scalar(1)), std::invalid_argument);
}

TEST(SoftmaxTest, AbstractRunChargesLikeRealRun) {
  expect_abstract_matches_real([](const std::vector<Tensor>& in) { return ops::softmax(ops::relu(in[0])); },
                               {random_host({4, 3}, -1, 1, 63)});
}

}  // namespace
}  // namespace keel
