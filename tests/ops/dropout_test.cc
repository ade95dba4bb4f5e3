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
using testing::tolerances;

Tensor ones(int64_t n) { return host({n}, std::vector<float>(static_cast<size_t>(n), 1.0f)); }

TEST(DropoutTest, RateZeroIsIdentity) {
  Tensor x = random_host({4, 5}, -3, 3, 111);
  EXPECT_EQ(ops::dropout(x, 0.0f, 42).to_vector(), x.to_vector());
}

TEST(DropoutTest, KeepsAboutOneMinusRateAndScalesByItsInverse) {
  const int64_t n = 200000;
  const float rate = 0.3f;
  const std::vector<float> y = ops::dropout(ones(n), rate, 7).to_vector();
  int64_t kept = 0;
  double sum = 0;
  for (float v : y) {
    if (v != 0.0f) {
      ++kept;
      EXPECT_FLOAT_EQ(v, 1.0f / (1.0f - rate));
    }
    sum += v;
  }
  // Binomial(n, 0.7): sd = sqrt(n * 0.21) ≈ 205 -> 0.1% of n; 0.5% is ~5 sd.
  EXPECT_NEAR(static_cast<double>(kept) / n, 1.0 - rate, 5e-3);
  // Inverted dropout preserves the mean.
  EXPECT_NEAR(sum / n, 1.0, 1e-2);
}

TEST(DropoutTest, SameKeySameMaskDifferentKeyDifferentMask) {
  Tensor x = ones(1000);
  const std::vector<float> a = ops::dropout(x, 0.5f, 123).to_vector();
  const std::vector<float> b = ops::dropout(x, 0.5f, 123).to_vector();
  const std::vector<float> c = ops::dropout(x, 0.5f, 124).to_vector();
  EXPECT_EQ(a, b);
  int64_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += (a[i] != c[i]) ? 1 : 0;
  // Independent masks at rate 0.5 differ at about half the elements.
  EXPECT_GT(differ, 350);
  EXPECT_LT(differ, 650);
}

TEST(DropoutTest, MaskDependsOnlyOnKeyAndIndex) {
  // The first 100 elements of a longer tensor get the same mask as a 100-element tensor.
  const std::vector<float> shortm = ops::dropout(ones(100), 0.4f, 9).to_vector();
  const std::vector<float> longm = ops::dropout(ones(300), 0.4f, 9).to_vector();
  EXPECT_EQ(shortm, std::vector<float>(longm.begin(), longm.begin() + 100));
}

TEST(DropoutTest, GradientIsTheMask) {
  Tensor x = random_host({50}, 0.5f, 2.0f, 112);
  GradientTape tape;
  tape.watch(x);
  Tensor y = ops::dropout(x, 0.25f, 5);
  std::vector<Tensor> g = tape.gradient(ops::reduce_sum(y), {x});
  const std::vector<float> mask = ops::dropout(ones(50), 0.25f, 5).to_vector();
  EXPECT_EQ(g[0].to_vector(), mask);
  int64_t dropped = 0;
  for (float m : mask) dropped += m == 0.0f ? 1 : 0;
  EXPECT_GT(dropped, 0) << "the test needs some dropped elements to mean anything";
}

TEST(DropoutTest, GradientMatchesCentralDifferences) {
  expect_gradients_match([](const std::vector<Tensor>& in) { return ops::dropout(in[0], 0.5f, 77); },
                         {random_host({4, 6}, -1, 1, 113)}, tolerances("dropout", 1e-2, 1e-4, 1e-3));
}

TEST(DropoutTest, BadRateThrowsInvalidArgument) {
  Tensor x = ones(4);
  EXPECT_THROW(ops::dropout(x, 1.0f, 1), std::invalid_argument);
  EXPECT_THROW(ops::dropout(x, -0.1f, 1), std::invalid_argument);
  EXPECT_THROW(ops::dropout(x, std::nanf(""), 1), std::invalid_argument);
}

TEST(DropoutTest, AbstractRunChargesLikeRealRun) {
  expect_abstract_matches_real([](const std::vector<Tensor>& in) { return ops::dropout(in[0], 0.5f, 3); },
                               {random_host({3, 4}, -1, 1, 114)});
}

}  // namespace
}  // namespace keel
