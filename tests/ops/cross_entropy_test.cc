#include <cmath>
#include <limits>
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

// The unfused reference: -sum_j y_j * log_softmax(z)_j, in double, row by row.
std::vector<double> unfused_cross_entropy(const Tensor& labels, const Tensor& logits) {
  const int64_t n = logits.dim(0), c = logits.dim(1);
  const std::vector<float> z = logits.to_vector(), y = labels.to_vector();
  std::vector<double> out;
  for (int64_t i = 0; i < n; ++i) {
    double m = -INFINITY;
    for (int64_t j = 0; j < c; ++j) m = std::max(m, static_cast<double>(z[i * c + j]));
    double s = 0;
    for (int64_t j = 0; j < c; ++j) s += std::exp(z[i * c + j] - m);
    double loss = 0;
    for (int64_t j = 0; j < c; ++j) loss -= y[i * c + j] * (z[i * c + j] - m - std::log(s));
    out.push_back(loss);
  }
  return out;
}

Tensor one_hot(const std::vector<int>& ids, int64_t classes) {
  std::vector<float> v(ids.size() * static_cast<size_t>(classes), 0.0f);
  for (size_t i = 0; i < ids.size(); ++i) v[i * static_cast<size_t>(classes) + static_cast<size_t>(ids[i])] = 1.0f;
  return host({static_cast<int64_t>(ids.size()), classes}, v);
}

void expect_near_each(const Tensor& got, const std::vector<double>& want, double rel) {
  ASSERT_EQ(got.shape(), (Shape{static_cast<int64_t>(want.size())}));
  const std::vector<float> g = got.to_vector();
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(g[i], want[i], rel * std::max(1.0, std::fabs(want[i]))) << "row " << i;
  }
}

// --- softmax_cross_entropy_with_logits (dense labels) ---

TEST(SoftmaxCrossEntropyTest, EqualsUnfusedLogSoftmax) {
  Tensor logits = random_host({4, 5}, -3, 3, 71);
  // Soft labels, including a row that does not sum to 1 (the fused form must not assume it does).
  Tensor labels = host({4, 5}, {0, 0, 1, 0, 0,  0.2f, 0.3f, 0.5f, 0, 0,  0.1f, 0.1f, 0.1f, 0.1f, 0.6f,
                                0.5f, 0, 0, 0, 0.3f});
  expect_near_each(ops::softmax_cross_entropy_with_logits(labels, logits), unfused_cross_entropy(labels, logits), 1e-6);
}

TEST(SoftmaxCrossEntropyTest, HandValue) {
  // logits (0, ln 3): softmax (1/4, 3/4); label 0 -> ln 4, label 1 -> ln(4/3).
  Tensor logits = host({2, 2}, {0, std::log(3.0f), 0, std::log(3.0f)});
  Tensor loss = ops::softmax_cross_entropy_with_logits(host({2, 2}, {1, 0, 0, 1}), logits);
  EXPECT_NEAR(loss.to_vector()[0], std::log(4.0), 1e-6);
  EXPECT_NEAR(loss.to_vector()[1], std::log(4.0 / 3.0), 1e-6);
}

TEST(SoftmaxCrossEntropyTest, StableForLargeLogits) {
  // A shift of 1e4 overflows exp() in float; the loss is shift-invariant.
  Tensor labels = host({2, 3}, {0, 1, 0, 0.25f, 0.25f, 0.5f});
  Tensor small = host({2, 3}, {1, 2, 0, -2, 0, 1});
  Tensor big = host({2, 3}, {1e4f + 1, 1e4f + 2, 1e4f, -1e4f - 2, -1e4f, -1e4f + 1});
  expect_near_each(ops::softmax_cross_entropy_with_logits(labels, big), unfused_cross_entropy(labels, small), 4e-3);  // float ulp at 1e4 is ~1e-3
}

TEST(SoftmaxCrossEntropyTest, FiniteForHugeLogitsWithFiniteGradient) {
  Tensor logits = host({2, 2}, {1e30f, -1e30f, 1e30f, -1e30f});
  Tensor labels = host({2, 2}, {1, 0, 0, 1});
  GradientTape tape;
  tape.watch(logits);
  Tensor loss = ops::softmax_cross_entropy_with_logits(labels, logits);
  const std::vector<float> v = loss.to_vector();
  EXPECT_EQ(v[0], 0.0f);  // the right class with certainty
  EXPECT_TRUE(std::isfinite(v[1]));
  EXPECT_NEAR(v[1], 2e30, 1e24);  // lse - z = 1e30 - (-1e30)
  std::vector<Tensor> g = tape.gradient(ops::reduce_sum(loss), {logits});
  // d/dz = softmax - y = (1, 0) - y. exp(-2e30) underflows to 0 in Eigen's AVX-512 exp and to the
  // subnormal 2.9e-39 at its argument clamp in the SSE2 one (the instrumented build has no
  // -march=native): both are the softmax's 0 to float precision.
  const std::vector<float> expected = {0, 0, 1, -1};
  const std::vector<float> got = g[0].to_vector();
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-37f) << i;
}

TEST(SoftmaxCrossEntropyTest, GradientFlowsToLogitsAndMatchesCentralDifferences) {
  Tensor labels = host({3, 4}, {0, 1, 0, 0,  0.5f, 0.5f, 0, 0,  0.1f, 0.2f, 0.3f, 0.4f});
  auto opts = tolerances("softmax_cross_entropy_with_logits", 1e-3, 1e-5, 1e-2);
  opts.check_inputs = {1};
  expect_gradients_match([](const std::vector<Tensor>& in) { return ops::softmax_cross_entropy_with_logits(in[0], in[1]); },
                         {labels, random_host({3, 4}, -2, 2, 72)}, opts);
}

TEST(SoftmaxCrossEntropyTest, NoGradientForLabels) {
  Tensor labels = host({1, 2}, {0.3f, 0.7f}), logits = host({1, 2}, {0.1f, -0.2f});
  GradientTape tape;
  tape.watch(labels);
  tape.watch(logits);
  Tensor loss = ops::reduce_sum(ops::softmax_cross_entropy_with_logits(labels, logits));
  std::vector<Tensor> g = tape.gradient(loss, {labels, logits});
  EXPECT_FALSE(g[0].defined()) << "the op's contract: gradient flows to the logits only";
  EXPECT_TRUE(g[1].defined());
}

TEST(SoftmaxCrossEntropyTest, ShapeErrorsThrowInvalidArgument) {
  Tensor logits = random_host({2, 3}, -1, 1, 73);
  EXPECT_THROW(ops::softmax_cross_entropy_with_logits(one_hot({0, 1}, 4), logits), std::invalid_argument);
  EXPECT_THROW(ops::softmax_cross_entropy_with_logits(host({2}, {0, 1}), logits), std::invalid_argument);
  EXPECT_THROW(ops::softmax_cross_entropy_with_logits(host({3}, {0, 1, 0}), host({3}, {0, 1, 0})),
               std::invalid_argument);
}

TEST(SoftmaxCrossEntropyTest, AbstractRunChargesLikeRealRun) {
  expect_abstract_matches_real(
      [](const std::vector<Tensor>& in) { return ops::softmax_cross_entropy_with_logits(in[0], in[1]); },
      {one_hot({0, 2, 1}, 3), random_host({3, 3}, -1, 1, 74)});
}

TEST(SoftmaxCrossEntropyTest, AbstractRunOfAnMlpChainChargesLikeRealRun) {
  // x (4, 6) -> matmul -> bias_add -> relu -> matmul -> cross-entropy -> mean: the planner's view of
  // a training step's forward and backward must charge exactly what the real step charges.
  expect_abstract_matches_real(
      [](const std::vector<Tensor>& in) {
        Tensor h = ops::relu(ops::bias_add(ops::matmul(in[0], in[1]), in[2]));
        return ops::reduce_mean(ops::softmax_cross_entropy_with_logits(in[4], ops::matmul(h, in[3])));
      },
      {random_host({4, 6}, -1, 1, 75), random_host({6, 5}, -1, 1, 76), random_host({5}, -1, 1, 77),
       random_host({5, 3}, -1, 1, 78), one_hot({0, 2, 1, 1}, 3)});
}

// --- sparse_softmax_cross_entropy_with_logits ---

TEST(SparseSoftmaxCrossEntropyTest, EqualsUnfusedAndDenseForm) {
  Tensor logits = random_host({4, 5}, -3, 3, 81);
  const std::vector<int> ids = {4, 0, 2, 2};
  Tensor sparse = ops::sparse_softmax_cross_entropy_with_logits(host({4}, {4, 0, 2, 2}), logits);
  expect_near_each(sparse, unfused_cross_entropy(one_hot(ids, 5), logits), 1e-6);
  const std::vector<float> dense = ops::softmax_cross_entropy_with_logits(one_hot(ids, 5), logits).to_vector();
  for (size_t i = 0; i < dense.size(); ++i) EXPECT_NEAR(sparse.to_vector()[i], dense[i], 1e-6);
}

TEST(SparseSoftmaxCrossEntropyTest, FiniteForHugeLogits) {
  Tensor loss = ops::sparse_softmax_cross_entropy_with_logits(host({2}, {0, 1}), host({2, 2}, {1e30f, -1e30f, 1e30f, -1e30f}));
  const std::vector<float> v = loss.to_vector();
  EXPECT_EQ(v[0], 0.0f);
  EXPECT_TRUE(std::isfinite(v[1]));
  EXPECT_NEAR(v[1], 2e30, 1e24);
}

TEST(SparseSoftmaxCrossEntropyTest, GradientMatchesCentralDifferences) {
  auto opts = tolerances("sparse_softmax_cross_entropy_with_logits", 1e-3, 1e-5, 1e-2);
  opts.check_inputs = {1};
  expect_gradients_match(
      [](const std::vector<Tensor>& in) { return ops::sparse_softmax_cross_entropy_with_logits(in[0], in[1]); },
      {host({3}, {2, 0, 3}), random_host({3, 4}, -2, 2, 82)}, opts);
}

TEST(SparseSoftmaxCrossEntropyTest, BadLabelsThrowInvalidArgument) {
  Tensor logits = random_host({2, 4}, -1, 1, 83);
  EXPECT_THROW(ops::sparse_softmax_cross_entropy_with_logits(host({2}, {0, 4}), logits), std::invalid_argument);
  EXPECT_THROW(ops::sparse_softmax_cross_entropy_with_logits(host({2}, {0, 100}), logits), std::invalid_argument);
  EXPECT_THROW(ops::sparse_softmax_cross_entropy_with_logits(host({2}, {-1, 0}), logits), std::invalid_argument);
  EXPECT_THROW(ops::sparse_softmax_cross_entropy_with_logits(host({2}, {1.5f, 0}), logits), std::invalid_argument);
  EXPECT_THROW(ops::sparse_softmax_cross_entropy_with_logits(host({2}, {0, std::nanf("")}), logits),
               std::invalid_argument);
  EXPECT_THROW(ops::sparse_softmax_cross_entropy_with_logits(host({2}, {0, INFINITY}), logits), std::invalid_argument);
  // The message names the bad label's index.
  try {
    ops::sparse_softmax_cross_entropy_with_logits(host({2}, {0, 7}), logits);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("index 1"), std::string::npos) << e.what();
  }
}

TEST(SparseSoftmaxCrossEntropyTest, ShapeErrorsThrowInvalidArgument) {
  Tensor logits = random_host({2, 3}, -1, 1, 84);
  EXPECT_THROW(ops::sparse_softmax_cross_entropy_with_logits(host({3}, {0, 1, 2}), logits), std::invalid_argument);
  EXPECT_THROW(ops::sparse_softmax_cross_entropy_with_logits(host({2, 1}, {0, 1}), logits), std::invalid_argument);
  EXPECT_THROW(ops::sparse_softmax_cross_entropy_with_logits(one_hot({0, 1}, 3), logits), std::invalid_argument);
}

TEST(SparseSoftmaxCrossEntropyTest, AbstractRunChargesLikeRealRun) {
  expect_abstract_matches_real(
      [](const std::vector<Tensor>& in) { return ops::sparse_softmax_cross_entropy_with_logits(in[0], in[1]); },
      {host({3}, {0, 2, 1}), random_host({3, 3}, -1, 1, 85)});
}

// --- categorical_crossentropy (Keras's form on probabilities) ---

TEST(CategoricalCrossentropyTest, NormalisesThenTakesMinusSumYLogP) {
  // Row 0 sums to 2: q = (0.25, 0.75). Row 1 is already normalised.
  Tensor probs = host({2, 2}, {0.5f, 1.5f, 0.4f, 0.6f});
  Tensor labels = host({2, 2}, {1, 0, 0.5f, 0.5f});
  const std::vector<float> v = ops::categorical_crossentropy(labels, probs).to_vector();
  EXPECT_NEAR(v[0], -std::log(0.25), 1e-6);
  EXPECT_NEAR(v[1], -0.5 * std::log(0.4) - 0.5 * std::log(0.6), 1e-6);
}

TEST(CategoricalCrossentropyTest, ClipsToKerasEpsilon) {
  // p = (0, 1) with label 0: log(0) would be -inf; Keras clips to 1e-7 -> -log(1e-7) ≈ 16.118.
  Tensor probs = host({1, 2}, {0, 1});
  Tensor labels = host({1, 2}, {1, 0});
  GradientTape tape;
  tape.watch(probs);
  Tensor loss = ops::categorical_crossentropy(labels, probs);
  EXPECT_NEAR(loss.item(), -std::log(1e-7), 1e-3);
  // Through a clip at its bound no gradient flows (tf.clip_by_value), and nothing is inf/NaN.
  std::vector<Tensor> g = tape.gradient(ops::reduce_sum(loss), {probs});
  for (float v : g[0].to_vector()) {
    EXPECT_TRUE(std::isfinite(v));
    EXPECT_EQ(v, 0.0f);
  }
}

TEST(CategoricalCrossentropyTest, GradientAwayFromClipBoundsMatchesCentralDifferences) {
  // Unnormalised probabilities in [0.2, 1): the normalisation's gradient is checked too, and no
  // q = p / sum(p) comes near 1e-7 or 1 - 1e-7.
  Tensor labels = host({3, 4}, {0, 1, 0, 0,  0.25f, 0.25f, 0.5f, 0,  0.1f, 0.2f, 0.3f, 0.4f});
  auto opts = tolerances("categorical_crossentropy", 1e-3, 1e-5, 1e-2);
  opts.check_inputs = {1};
  expect_gradients_match([](const std::vector<Tensor>& in) { return ops::categorical_crossentropy(in[0], in[1]); },
                         {labels, random_host({3, 4}, 0.2f, 1.0f, 91)}, opts);
}

TEST(CategoricalCrossentropyTest, EqualsFusedFormOnSoftmaxProbabilities) {
  Tensor logits = random_host({3, 4}, -2, 2, 92);
  Tensor labels = one_hot({1, 3, 0}, 4);
  const std::vector<float> a = ops::categorical_crossentropy(labels, ops::softmax(logits)).to_vector();
  const std::vector<float> b = ops::softmax_cross_entropy_with_logits(labels, logits).to_vector();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5) << i;
}

TEST(CategoricalCrossentropyTest, ShapeErrorsThrowInvalidArgument) {
  EXPECT_THROW(ops::categorical_crossentropy(host({2}, {0, 1}), host({2, 2}, {0.5f, 0.5f, 0.5f, 0.5f})),
               std::invalid_argument);
}

TEST(CategoricalCrossentropyTest, AbstractRunChargesLikeRealRun) {
  expect_abstract_matches_real([](const std::vector<Tensor>& in) { return ops::categorical_crossentropy(in[0], in[1]); },
                               {one_hot({0, 2}, 3), random_host({2, 3}, 0.1f, 1, 93)});
}

// --- sparse_categorical_crossentropy ---

TEST(SparseCategoricalCrossentropyTest, ForwardAndGradient) {
  Tensor probs = host({2, 3}, {0.2f, 0.3f, 0.5f, 1, 1, 2});
  const std::vector<float> v = ops::sparse_categorical_crossentropy(host({2}, {2, 0}), probs).to_vector();
  EXPECT_NEAR(v[0], -std::log(0.5), 1e-6);
  EXPECT_NEAR(v[1], -std::log(0.25), 1e-6);
  auto opts = tolerances("sparse_categorical_crossentropy", 1e-3, 1e-5, 1e-2);
  opts.check_inputs = {1};
  expect_gradients_match(
      [](const std::vector<Tensor>& in) { return ops::sparse_categorical_crossentropy(in[0], in[1]); },
      {host({3}, {1, 0, 3}), random_host({3, 4}, 0.2f, 1.0f, 94)}, opts);
}

TEST(SparseCategoricalCrossentropyTest, BadLabelsThrowInvalidArgument) {
  Tensor probs = host({2, 3}, {0.2f, 0.3f, 0.5f, 1, 1, 2});
  EXPECT_THROW(ops::sparse_categorical_crossentropy(host({2}, {3, 0}), probs), std::invalid_argument);
  EXPECT_THROW(ops::sparse_categorical_crossentropy(host({2}, {0, -1}), probs), std::invalid_argument);
  EXPECT_THROW(ops::sparse_categorical_crossentropy(host({2}, {0.5f, 0}), probs), std::invalid_argument);
  EXPECT_THROW(ops::sparse_categorical_crossentropy(host({2}, {std::nanf(""), 0}), probs), std::invalid_argument);
}

TEST(SparseCategoricalCrossentropyTest, AbstractRunChargesLikeRealRun) {
  expect_abstract_matches_real(
      [](const std::vector<Tensor>& in) { return ops::sparse_categorical_crossentropy(in[0], in[1]); },
      {host({2}, {1, 0}), random_host({2, 3}, 0.1f, 1, 95)});
}

}  // namespace
}  // namespace keel
