// batch_norm_training / batch_norm_inference: forward against hand computation, gradients against
// central differences, planning against the real run, and values and gradients against PyTorch
// (tests/golden/bn_small.json, written by bench/golden_bn.py).
#include "framework/ops/batch_norm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "framework/autodiff/tape.h"
#include "framework/ops/concat.h"
#include "framework/ops/ops.h"
#include "framework/ops/precision.h"
#include "tests/support/golden.h"
#include "tests/support/grad_check.h"
#include "tests/support/thread_checks.h"

namespace keel {
namespace {

using testing::expect_abstract_matches_real;
using testing::expect_gradients_match;
using testing::host;
using testing::random_host;
using testing::tolerances;

// Per-channel mean and biased variance of x viewed as (rows, C), in double.
struct Moments {
  std::vector<double> mean, variance;
};
Moments moments_by_hand(const std::vector<float>& x, int64_t channels) {
  const int64_t rows = static_cast<int64_t>(x.size()) / channels;
  Moments m{std::vector<double>(channels, 0.0), std::vector<double>(channels, 0.0)};
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < channels; ++c) m.mean[c] += x[r * channels + c];
  }
  for (double& v : m.mean) v /= static_cast<double>(rows);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < channels; ++c) {
      const double d = x[r * channels + c] - m.mean[c];
      m.variance[c] += d * d;
    }
  }
  for (double& v : m.variance) v /= static_cast<double>(rows);
  return m;
}

// gamma * (x - mean) / sqrt(variance + epsilon) + beta, in double.
std::vector<double> normalize_by_hand(const std::vector<float>& x, const std::vector<double>& mean,
                                      const std::vector<double>& variance, const std::vector<float>& gamma,
                                      const std::vector<float>& beta, double epsilon) {
  const size_t channels = gamma.size();
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t c = i % channels;
    y[i] = gamma[c] * (x[i] - mean[c]) / std::sqrt(variance[c] + epsilon) + beta[c];
  }
  return y;
}

void expect_near_all(const std::vector<float>& got, const std::vector<double>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << what << " element " << i;
}

// --- batch_norm_training: forward ---

TEST(BatchNormTrainingTest, ForwardMatchesHandComputationForNC) {
  // (4, 2): channel 0 is {1, 2, 3, 6} (mean 3, biased variance 3.5), channel 1 is constant 5.
  const std::vector<float> xv = {1, 5, 2, 5, 3, 5, 6, 5};
  const std::vector<float> gamma = {2.0f, 0.5f}, beta = {0.25f, -1.0f};
  ops::BatchNormResult r = ops::batch_norm_training(host({4, 2}, xv), host({2}, gamma), host({2}, beta), 1e-3f);
  ASSERT_EQ(r.y.shape(), (Shape{4, 2}));
  ASSERT_EQ(r.mean.shape(), (Shape{2}));
  ASSERT_EQ(r.variance.shape(), (Shape{2}));
  EXPECT_NEAR(r.mean.to_vector()[0], 3.0f, 1e-6);
  EXPECT_NEAR(r.mean.to_vector()[1], 5.0f, 1e-6);
  EXPECT_NEAR(r.variance.to_vector()[0], 3.5f, 1e-6) << "the variance is biased (divided by 4, not 3)";
  EXPECT_EQ(r.variance.to_vector()[1], 0.0f);
  const double s0 = 2.0 / std::sqrt(3.5 + 1e-3);
  expect_near_all(r.y.to_vector(), {0.25 - 2 * s0, -1, 0.25 - s0, -1, 0.25, -1, 0.25 + 3 * s0, -1}, 1e-5, "y");
}

TEST(BatchNormTrainingTest, NhwcStatisticsCoverEveryAxisButChannels) {
  Tensor x = random_host({3, 2, 4, 5}, -2, 3, 101);
  Tensor gamma = random_host({5}, 0.5f, 1.5f, 102), beta = random_host({5}, -1, 1, 103);
  ops::BatchNormResult r = ops::batch_norm_training(x, gamma, beta, 1e-3f);
  ASSERT_EQ(r.y.shape(), x.shape());
  const Moments m = moments_by_hand(x.to_vector(), 5);
  expect_near_all(r.mean.to_vector(), m.mean, 1e-6, "mean");
  expect_near_all(r.variance.to_vector(), m.variance, 1e-6, "variance");
  expect_near_all(r.y.to_vector(), normalize_by_hand(x.to_vector(), m.mean, m.variance, gamma.to_vector(),
                                                     beta.to_vector(), 1e-3),
                  2e-6, "y");
}

TEST(BatchNormTrainingTest, NormalisedChannelsHaveZeroMeanAndUnitVariance) {
  // With gamma = 1, beta = 0 and a tiny epsilon, each output channel is standardised.
  Tensor x = random_host({16, 3}, -5, 5, 104);
  ops::BatchNormResult r = ops::batch_norm_training(x, Tensor::full({3}, 1.0f), Tensor::zeros({3}), 1e-7f);
  const Moments m = moments_by_hand(r.y.to_vector(), 3);
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(m.mean[c], 0.0, 1e-6) << c;
    EXPECT_NEAR(m.variance[c], 1.0, 1e-5) << c;
  }
}

TEST(BatchNormTrainingTest, VarianceIsAccurateWhenTheMeanDwarfsTheSpread) {
  // {9999, 10000, 10001}: E[x²] - E[x]² in float would lose every digit; the two-pass form does not.
  ops::BatchNormResult r =
      ops::batch_norm_training(host({3, 1}, {9999, 10000, 10001}), host({1}, {1}), host({1}, {0}), 1e-3f);
  EXPECT_FLOAT_EQ(r.mean.item(), 10000.0f);
  EXPECT_FLOAT_EQ(r.variance.item(), 2.0f / 3.0f);
  const double s = 1.0 / std::sqrt(2.0 / 3.0 + 1e-3);
  expect_near_all(r.y.to_vector(), {-s, 0, s}, 1e-5, "y");
}

TEST(BatchNormTrainingTest, EveryOutputInAChannelDependsOnEveryInputOfThatChannelOnly) {
  Tensor x = random_host({5, 3}, -1, 1, 105);
  Tensor gamma = random_host({3}, 0.5f, 1.5f, 106), beta = random_host({3}, -1, 1, 107);
  // d y[0, 1] / d x: non-zero on all five rows of channel 1, exactly zero on channels 0 and 2.
  std::vector<float> pick(15, 0.0f);
  pick[1] = 1.0f;
  GradientTape tape;
  tape.watch(x);
  Tensor y = ops::batch_norm_training(x, gamma, beta, 1e-3f).y;
  Tensor target = ops::matmul(ops::reshape(y, {1, 15}), host({15, 1}, pick));
  const std::vector<float> g = tape.gradient(target, {x})[0].to_vector();
  for (int row = 0; row < 5; ++row) {
    EXPECT_GT(std::fabs(g[row * 3 + 1]), 1e-3f) << "row " << row;
    EXPECT_EQ(g[row * 3 + 0], 0.0f) << "row " << row;
    EXPECT_EQ(g[row * 3 + 2], 0.0f) << "row " << row;
  }
}

TEST(BatchNormTrainingTest, EmptyBatchGivesZeroStatisticsAndZeroParameterGradients) {
  Tensor x = Tensor::zeros({0, 3});
  Tensor gamma = host({3}, {1, 2, 3}), beta = host({3}, {0, 0, 0});
  GradientTape tape;
  tape.watch(x);
  tape.watch(gamma);
  tape.watch(beta);
  ops::BatchNormResult r = ops::batch_norm_training(x, gamma, beta, 1e-3f);
  EXPECT_EQ(r.y.shape(), (Shape{0, 3}));
  EXPECT_EQ(r.mean.to_vector(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(r.variance.to_vector(), (std::vector<float>{0, 0, 0}));
  std::vector<Tensor> g = tape.gradient(ops::reduce_sum(r.y), {x, gamma, beta});
  ASSERT_TRUE(g[1].defined());
  ASSERT_TRUE(g[2].defined());
  EXPECT_EQ(g[0].shape(), (Shape{0, 3}));
  EXPECT_EQ(g[1].to_vector(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(g[2].to_vector(), (std::vector<float>{0, 0, 0}));
}

TEST(BatchNormTrainingTest, ShapeErrorsThrowInvalidArgument) {
  Tensor g = Tensor::full({3}, 1.0f), b = Tensor::zeros({3});
  EXPECT_THROW(ops::batch_norm_training(Tensor::zeros({3}), g, b, 1e-3f), std::invalid_argument) << "no batch axis";
  EXPECT_THROW(ops::batch_norm_training(Tensor::zeros({2, 4}), g, b, 1e-3f), std::invalid_argument);
  EXPECT_THROW(ops::batch_norm_training(Tensor::zeros({2, 3}), Tensor::full({3, 1}, 1.0f), b, 1e-3f),
               std::invalid_argument);
  EXPECT_THROW(ops::batch_norm_training(Tensor::zeros({2, 3}), g, Tensor(), 1e-3f), std::invalid_argument);
}

// --- batch_norm_training: gradients ---

TEST(BatchNormTrainingTest, GradientsMatchCentralDifferences) {
  // NHWC with 12 elements per channel; the batch statistics couple every element of a channel.
  expect_gradients_match(
      [](const std::vector<Tensor>& in) { return ops::batch_norm_training(in[0], in[1], in[2], 1e-3f).y; },
      {random_host({3, 2, 2, 4}, -2, 2, 111), random_host({4}, 0.5f, 1.5f, 112), random_host({4}, -1, 1, 113)},
      tolerances("batch_norm_training", 1e-2, 1e-3, 1e-2));
}

TEST(BatchNormTrainingTest, GradientsMatchForEachInputAlone) {
  // Each watched alone: backward then saves only what that input's gradient needs.
  const std::vector<Tensor> in = {random_host({6, 3}, -2, 2, 114), random_host({3}, 0.5f, 1.5f, 115),
                                  random_host({3}, -1, 1, 116)};
  auto f = [](const std::vector<Tensor>& t) { return ops::batch_norm_training(t[0], t[1], t[2], 1e-3f).y; };
  for (int i = 0; i < 3; ++i) {
    testing::GradCheckOptions o = tolerances("batch_norm_training input " + std::to_string(i), 1e-2, 1e-3, 1e-2);
    o.check_inputs = {i};
    expect_gradients_match(f, in, o);
  }
}

TEST(BatchNormTrainingTest, GradientsMatchWhenTheOutputFeedsANonlinearity) {
  // relu(bn(x))² summed: dy differs per element and is zero on part of each channel.
  expect_gradients_match(
      [](const std::vector<Tensor>& in) {
        Tensor y = ops::relu(ops::batch_norm_training(in[0], in[1], in[2], 1e-3f).y);
        return ops::reduce_sum(ops::matmul(ops::reshape(y, {1, y.size()}), ops::reshape(y, {y.size(), 1})));
      },
      {random_host({8, 2}, -3, 3, 117), random_host({2}, 0.5f, 1.5f, 118), random_host({2}, -0.2f, 0.2f, 119)},
      tolerances("batch_norm_training into relu", 1e-3, 1e-3, 1e-2));
}

TEST(BatchNormTrainingTest, BatchStatisticsAreNotDifferentiable) {
  // As TensorFlow's FusedBatchNormGrad: only y carries a gradient.
  Tensor x = random_host({4, 2}, -1, 1, 120);
  GradientTape tape;
  tape.watch(x);
  ops::BatchNormResult r = ops::batch_norm_training(x, Tensor::full({2}, 1.0f), Tensor::zeros({2}), 1e-3f);
  EXPECT_FALSE(tape.gradient(ops::reduce_sum(r.mean), {x})[0].defined());
}

TEST(BatchNormTrainingTest, AbstractRunChargesLikeRealRun) {
  expect_abstract_matches_real(
      [](const std::vector<Tensor>& in) { return ops::batch_norm_training(in[0], in[1], in[2], 1e-3f).y; },
      {random_host({2, 3, 3, 4}, -1, 1, 121), random_host({4}, 0.5f, 1.5f, 122), random_host({4}, -1, 1, 123)});
}

TEST(BatchNormTrainingTest, AbstractRunOfAnEmptyBatchChargesLikeRealRun) {
  // An empty tensor is never abstract, so the empty batch is made inside f and the checked output
  // is y with gamma appended as one more row: the (C,) parameters, statistics and their gradients
  // are abstract while x, y and dy are empty. (Not reduce_sum: its backward does not yet accept an
  // empty input when planning.)
  expect_abstract_matches_real(
      [](const std::vector<Tensor>& in) {
        Tensor y = ops::batch_norm_training(Tensor::zeros({0, 4}), in[0], in[1], 1e-3f).y;
        return ops::concat({y, ops::reshape(in[0], {1, 4})}, 0);
      },
      {random_host({4}, 0.5f, 1.5f, 124), random_host({4}, -1, 1, 125)});
}

// --- BatchNormalization + ReLU fused (relu = true) ---

// y and the gradients for x, gamma and beta of sum(y * w), BatchNormalization then ReLU as two ops
// or as one, training or inference, in float32 or with bfloat16 activations (x widened as read).
struct BnRelu {
  std::vector<float> y, dx, dgamma, dbeta;
};
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

BnRelu bn_relu(bool fused, bool training, DType dt) {
  const Shape shape = {4, 3, 3, 8};
  Tensor x = random_host(shape, -2, 2, 151), gamma = random_host({8}, -1.5f, 1.5f, 152), beta = random_host({8}, -0.5f, 0.5f, 153);
  const Tensor w = random_host({4 * 3 * 3 * 8, 1}, -1, 1, 154);
  const Tensor mean = random_host({8}, -0.5f, 0.5f, 155), variance = random_host({8}, 0.5f, 2.0f, 156);
  GradientTape tape;
  tape.watch(x);
  tape.watch(gamma);
  tape.watch(beta);
  Tensor y;
  {
    const ops::ComputeDTypeScope compute(dt);
    const Tensor in = ops::cast(x, dt);
    if (training) {
      y = fused ? ops::batch_norm_training(in, gamma, beta, 1e-3f, true).y
                : ops::relu(ops::batch_norm_training(in, gamma, beta, 1e-3f).y);
    } else {
      y = fused ? ops::batch_norm_inference(in, gamma, beta, mean, variance, 1e-3f, true)
                : ops::relu(ops::batch_norm_inference(in, gamma, beta, mean, variance, 1e-3f));
    }
  }
  const Tensor y32 = ops::cast(y, DType::float32);
  const Tensor loss = ops::reduce_sum(ops::matmul(ops::reshape(y32, {1, y32.size()}), w));
  const std::vector<Tensor> g = tape.gradient(loss, {x, gamma, beta});
  return {y32.to_vector(), g[0].to_vector(), g[1].to_vector(), g[2].to_vector()};
}

TEST(BatchNormReluTest, FusedGivesTheBitsOfBatchNormThenRelu) {
  for (const DType dt : {DType::float32, DType::bfloat16}) {
    for (const bool training : {true, false}) {
      const std::string what = std::string(training ? "training" : "inference") + (dt == DType::bfloat16 ? ", bfloat16" : "");
      const BnRelu two = bn_relu(false, training, dt), one = bn_relu(true, training, dt);
      EXPECT_TRUE(same_bits(two.y, one.y)) << what;
      EXPECT_TRUE(same_bits(two.dx, one.dx)) << what;
      EXPECT_TRUE(same_bits(two.dgamma, one.dgamma)) << what;
      EXPECT_TRUE(same_bits(two.dbeta, one.dbeta)) << what;
      // The ReLU did something: part of y is 0 and part of the gradient with it.
      EXPECT_GT(std::count(one.y.begin(), one.y.end(), 0.0f), 20) << what;
      EXPECT_LT(std::count(one.y.begin(), one.y.end(), 0.0f), 268) << what;
    }
  }
}

TEST(BatchNormReluTest, GradientsMatchCentralDifferences) {
  const std::vector<Tensor> in = {random_host({3, 2, 2, 4}, -2, 2, 157), random_host({4}, 0.5f, 1.5f, 158),
                                  random_host({4}, -0.3f, 0.3f, 159), random_host({4}, -0.5f, 0.5f, 160),
                                  random_host({4}, 0.5f, 2.0f, 161)};
  expect_gradients_match(
      [](const std::vector<Tensor>& t) { return ops::batch_norm_training(t[0], t[1], t[2], 1e-3f, true).y; },
      {in[0], in[1], in[2]}, tolerances("batch_norm_training + relu", 1e-3, 1e-3, 1e-2));
  testing::GradCheckOptions o = tolerances("batch_norm_inference + relu", 1e-3, 1e-4, 1e-3);
  o.check_inputs = {0, 1, 2};
  expect_gradients_match(
      [](const std::vector<Tensor>& t) { return ops::batch_norm_inference(t[0], t[1], t[2], t[3], t[4], 1e-3f, true); }, in, o);
  // Each parameter alone: the fused backward saves x for the mask even when only beta is watched.
  for (int i = 1; i < 3; ++i) {
    o.name = "batch_norm_training + relu, input " + std::to_string(i);
    o.check_inputs = {i};
    expect_gradients_match(
        [](const std::vector<Tensor>& t) { return ops::batch_norm_training(t[0], t[1], t[2], 1e-3f, true).y; },
        {in[0], in[1], in[2]}, o);
  }
}

TEST(BatchNormReluTest, AbstractRunChargesLikeRealRun) {
  expect_abstract_matches_real(
      [](const std::vector<Tensor>& in) { return ops::batch_norm_training(in[0], in[1], in[2], 1e-3f, true).y; },
      {random_host({2, 3, 3, 4}, -1, 1, 162), random_host({4}, 0.5f, 1.5f, 163), random_host({4}, -1, 1, 164)});
}

// --- BatchNormalization + Add + ReLU fused (batch_norm_add_relu_*) ---

// y = relu(residual + bn(x)) and the gradients of sum(y * w) for x, gamma, beta and the residual,
// as three ops (the Add as Keras's ResNets call it: [shortcut, x]) or as one.
std::vector<std::vector<float>> bn_add_relu(bool fused, bool training, DType dt) {
  const Shape shape = {4, 3, 3, 8};
  Tensor x = random_host(shape, -2, 2, 171), gamma = random_host({8}, -1.5f, 1.5f, 172), beta = random_host({8}, -0.5f, 0.5f, 173);
  Tensor residual = random_host(shape, -1, 1, 174);
  const Tensor w = random_host({4 * 3 * 3 * 8, 1}, -1, 1, 175);
  const Tensor mean = random_host({8}, -0.5f, 0.5f, 176), variance = random_host({8}, 0.5f, 2.0f, 177);
  GradientTape tape;
  for (const Tensor* t : {&x, &gamma, &beta, &residual}) tape.watch(*t);
  Tensor y;
  {
    const ops::ComputeDTypeScope compute(dt);
    const Tensor in = ops::cast(x, dt), s = ops::cast(residual, dt);
    if (fused) {
      y = training ? ops::batch_norm_add_relu_training(in, gamma, beta, s, 1e-3f).y
                   : ops::batch_norm_add_relu_inference(in, gamma, beta, s, mean, variance, 1e-3f);
    } else {
      const Tensor bn = training ? ops::batch_norm_training(in, gamma, beta, 1e-3f).y
                                 : ops::batch_norm_inference(in, gamma, beta, mean, variance, 1e-3f);
      y = ops::relu(ops::add(s, bn));
    }
  }
  const Tensor y32 = ops::cast(y, DType::float32);
  const Tensor loss = ops::reduce_sum(ops::matmul(ops::reshape(y32, {1, y32.size()}), w));
  std::vector<std::vector<float>> out = {y32.to_vector()};
  for (const Tensor& g : tape.gradient(loss, {x, gamma, beta, residual})) out.push_back(g.to_vector());
  return out;
}

TEST(BatchNormAddReluTest, FusedGivesTheBitsOfTheThreeOps) {
  for (const DType dt : {DType::float32, DType::bfloat16}) {
    for (const bool training : {true, false}) {
      const std::string what = std::string(training ? "training" : "inference") + (dt == DType::bfloat16 ? ", bfloat16" : "");
      const auto three = bn_add_relu(false, training, dt), one = bn_add_relu(true, training, dt);
      ASSERT_EQ(three.size(), one.size());
      for (size_t i = 0; i < three.size(); ++i) EXPECT_TRUE(same_bits(three[i], one[i])) << what << ", value " << i;
      EXPECT_GT(std::count(one[0].begin(), one[0].end(), 0.0f), 20) << what;
      EXPECT_LT(std::count(one[0].begin(), one[0].end(), 0.0f), 268) << what;
    }
  }
}

TEST(BatchNormAddReluTest, GradientsMatchCentralDifferences) {
  const std::vector<Tensor> in = {random_host({3, 2, 2, 4}, -2, 2, 178), random_host({4}, 0.5f, 1.5f, 179),
                                  random_host({4}, -0.3f, 0.3f, 180), random_host({3, 2, 2, 4}, -0.5f, 0.5f, 191),
                                  random_host({4}, -0.5f, 0.5f, 182), random_host({4}, 0.5f, 2.0f, 183)};
  expect_gradients_match(
      [](const std::vector<Tensor>& t) { return ops::batch_norm_add_relu_training(t[0], t[1], t[2], t[3], 1e-3f).y; },
      {in[0], in[1], in[2], in[3]}, tolerances("batch_norm_add_relu_training", 1e-3, 1e-3, 1e-2));
  testing::GradCheckOptions o = tolerances("batch_norm_add_relu_inference", 1e-3, 1e-4, 1e-3);
  o.check_inputs = {0, 1, 2, 3};
  expect_gradients_match(
      [](const std::vector<Tensor>& t) { return ops::batch_norm_add_relu_inference(t[0], t[1], t[2], t[3], t[4], t[5], 1e-3f); },
      in, o);
}

TEST(BatchNormAddReluTest, AbstractRunChargesLikeRealRunAndBadResidualsAreRefused) {
  expect_abstract_matches_real(
      [](const std::vector<Tensor>& in) { return ops::batch_norm_add_relu_training(in[0], in[1], in[2], in[3], 1e-3f).y; },
      {random_host({2, 3, 3, 4}, -1, 1, 184), random_host({4}, 0.5f, 1.5f, 185), random_host({4}, -1, 1, 186),
       random_host({2, 3, 3, 4}, -1, 1, 187)});
  const Tensor x = random_host({2, 4}, -1, 1, 188), g = Tensor::full({4}, 1.0f), b = Tensor::zeros({4});
  EXPECT_THROW(ops::batch_norm_add_relu_training(x, g, b, Tensor::zeros({2, 3}), 1e-3f), std::invalid_argument);
  EXPECT_THROW(ops::batch_norm_add_relu_training(x, g, b, ops::cast(x, DType::bfloat16), 1e-3f), std::invalid_argument)
      << "the residual in another dtype than the compute dtype";
}

// --- batch_norm_inference ---

TEST(BatchNormInferenceTest, ForwardUsesTheGivenStatistics) {
  Tensor x = random_host({2, 3, 3}, -2, 2, 131);
  const std::vector<double> mean = {0.5, -1.0, 2.0}, variance = {0.25, 4.0, 1.0};
  const std::vector<float> gamma = {1.5f, 0.5f, -1.0f}, beta = {0.0f, 1.0f, -0.5f};
  Tensor y = ops::batch_norm_inference(x, host({3}, gamma), host({3}, beta), host({3}, {0.5f, -1.0f, 2.0f}),
                                       host({3}, {0.25f, 4.0f, 1.0f}), 1e-3f);
  ASSERT_EQ(y.shape(), x.shape());
  expect_near_all(y.to_vector(), normalize_by_hand(x.to_vector(), mean, variance, gamma, beta, 1e-3), 2e-6, "y");
}

TEST(BatchNormInferenceTest, GradientsMatchCentralDifferences) {
  const std::vector<Tensor> in = {random_host({3, 2, 2, 4}, -2, 2, 132), random_host({4}, 0.5f, 1.5f, 133),
                                  random_host({4}, -1, 1, 134), random_host({4}, -0.5f, 0.5f, 135),
                                  random_host({4}, 0.5f, 2.0f, 136)};
  auto f = [](const std::vector<Tensor>& t) { return ops::batch_norm_inference(t[0], t[1], t[2], t[3], t[4], 1e-3f); };
  testing::GradCheckOptions o = tolerances("batch_norm_inference", 1e-2, 1e-4, 1e-3);
  o.check_inputs = {0, 1, 2};
  expect_gradients_match(f, in, o);
  for (int i = 0; i < 3; ++i) {
    o.name = "batch_norm_inference input " + std::to_string(i);
    o.check_inputs = {i};
    expect_gradients_match(f, in, o);
  }
}

TEST(BatchNormInferenceTest, MovingStatisticsAreConstants) {
  Tensor x = random_host({4, 2}, -1, 1, 137), mean = host({2}, {0.1f, 0.2f}), variance = host({2}, {1.0f, 2.0f});
  GradientTape tape;
  tape.watch(x);
  tape.watch(mean);
  tape.watch(variance);
  Tensor y = ops::batch_norm_inference(x, Tensor::full({2}, 1.0f), Tensor::zeros({2}), mean, variance, 1e-3f);
  std::vector<Tensor> g = tape.gradient(ops::reduce_sum(y), {x, mean, variance});
  EXPECT_TRUE(g[0].defined());
  EXPECT_FALSE(g[1].defined());
  EXPECT_FALSE(g[2].defined());
}

TEST(BatchNormInferenceTest, ShapeErrorsThrowInvalidArgument) {
  Tensor one = Tensor::full({3}, 1.0f);
  EXPECT_THROW(ops::batch_norm_inference(Tensor::zeros({2, 3}), one, one, Tensor::zeros({2}), one, 1e-3f),
               std::invalid_argument);
}

TEST(BatchNormInferenceTest, AbstractRunChargesLikeRealRun) {
  expect_abstract_matches_real(
      [](const std::vector<Tensor>& in) {
        return ops::batch_norm_inference(in[0], in[1], in[2], in[3], in[4], 1e-3f);
      },
      {random_host({2, 2, 2, 3}, -1, 1, 138), random_host({3}, 0.5f, 1.5f, 139), random_host({3}, -1, 1, 140),
       random_host({3}, -1, 1, 141), random_host({3}, 0.5f, 2.0f, 142)});
}

// --- against PyTorch ---

using nlohmann::json;

const json& golden() { return testing::load_golden("bn_small.json"); }

using testing::tensor_of;

// Every element within rel * max(|want|, floor): `floor` keeps elements that are ~0 by cancellation
// from demanding more than float32 can give.
void expect_matches(const Tensor& got, const json& want, double rel, double floor, const std::string& what) {
  ASSERT_EQ(got.shape(), want.at("shape").get<Shape>()) << what;
  const std::vector<float> g = got.to_vector();
  const std::vector<double> w = want.at("values").get<std::vector<double>>();
  int bad = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    const double tol = rel * std::max(std::fabs(w[i]), floor);
    if (!(std::fabs(g[i] - w[i]) <= tol)) {
      if (++bad <= 5) {
        ADD_FAILURE() << what << " at " << testing::index_string(got.shape(), static_cast<int64_t>(i)) << ": keel "
                      << g[i] << ", PyTorch " << w[i] << ", |diff| " << std::fabs(g[i] - w[i]) << " > " << tol;
      }
    }
  }
  EXPECT_EQ(bad, 0) << what << ": elements out of tolerance";
}

TEST(BatchNormGoldenTest, TrainingForwardAndGradientsMatchPyTorch) {
  ASSERT_NO_THROW(golden());
  const json& d = golden();
  Tensor x = tensor_of(d.at("x")), gamma = tensor_of(d.at("gamma")), beta = tensor_of(d.at("beta"));
  Tensor w = tensor_of(d.at("loss_weights"));
  const float epsilon = d.at("epsilon").get<float>();
  GradientTape tape;
  tape.watch(x);
  tape.watch(gamma);
  tape.watch(beta);
  ops::BatchNormResult r = ops::batch_norm_training(x, gamma, beta, epsilon);
  // loss = sum(w * y), as a (1, n) x (n, 1) product.
  Tensor loss = ops::matmul(ops::reshape(r.y, {1, r.y.size()}), ops::reshape(w, {w.size(), 1}));
  std::vector<Tensor> g = tape.gradient(loss, {x, gamma, beta});
  const double rel = 1e-5;
  expect_matches(r.y, d.at("y"), rel, 1.0, "y");
  expect_matches(r.mean, d.at("batch_mean"), rel, 1.0, "batch mean");
  expect_matches(r.variance, d.at("batch_variance_biased"), rel, 1.0, "batch variance (biased)");
  // dx's scale is gamma * inv_std * |w| ~ 1; dgamma and dbeta are sums of 36 terms of size ~1.
  expect_matches(g[0], d.at("grad_x"), rel, 1.0, "d loss / d x");
  expect_matches(g[1], d.at("grad_gamma"), rel, 1.0, "d loss / d gamma");
  expect_matches(g[2], d.at("grad_beta"), rel, 1.0, "d loss / d beta");
}

TEST(BatchNormGoldenTest, InferenceWithTheBatchStatisticsEqualsTraining) {
  // Normalising with the batch's own (biased) statistics in inference mode gives training's y.
  const json& d = golden();
  Tensor y = ops::batch_norm_inference(tensor_of(d.at("x")), tensor_of(d.at("gamma")), tensor_of(d.at("beta")),
                                       tensor_of(d.at("batch_mean")), tensor_of(d.at("batch_variance_biased")),
                                       d.at("epsilon").get<float>());
  expect_matches(y, d.at("y"), 1e-5, 1.0, "y");
}

// Training and inference forms, forward and every gradient, on 1 to 4 threads: the same bits (rows
// enough for several blocks of partial sums, channels not a multiple of the vector width).
TEST(BatchNormTrainingTest, TheSameBitsOnOneToFourThreads) {
  const Tensor x = random_host({6, 24, 24, 37}, -2, 3, 21), gamma = random_host({37}, 0.5, 1.5, 22);
  const Tensor beta = random_host({37}, -1, 1, 23), dy = random_host({6, 24, 24, 37}, -1, 1, 24);
  const Tensor mm = random_host({37}, -1, 1, 25), mv = random_host({37}, 0.5, 2, 26);
  testing::expect_same_bits_on_threads([&] {
    std::vector<Tensor> got;
    for (bool training : {true, false}) {
      GradientTape tape;
      tape.watch(x);
      tape.watch(gamma);
      tape.watch(beta);
      const Tensor y = training ? ops::batch_norm_training(x, gamma, beta, 1e-3f).y
                                : ops::batch_norm_inference(x, gamma, beta, mm, mv, 1e-3f);
      const Tensor target = ops::matmul(ops::reshape(y, {1, y.size()}), ops::reshape(dy, {dy.size(), 1}));
      for (const Tensor& g : tape.gradient(target, {x, gamma, beta})) got.push_back(g);
      got.push_back(y);
    }
    return got;
  });
}

// Few rows of many channels (a ResNet's last stage at 32x32: the channel sums cut into groups of
// channels, not of rows; in vector instructions 64, 32 and 16 channels at a time where built with
// them: 80 = 64 + 16, 60 = 32 + 16 + 12 left to the row loop), with
// and without the fused ReLU, and beta alone: the same bits on 1 to 4 threads, and the statistics,
// dbeta and dgamma those of plain row-order sums in double, channel by channel.
TEST(BatchNormTrainingTest, ChannelGroupsOfFewRowsGiveTheBitsOfRowOrderSums) {
  const int64_t rows = 2 * 4 * 4, channels = 300;  // one block of rows; channel groups of 80, the last 60
  const Tensor x = random_host({2, 4, 4, channels}, -2, 3, 31), gamma = random_host({channels}, 0.5, 1.5, 32);
  const Tensor beta = random_host({channels}, -1, 1, 33), dy = random_host({2, 4, 4, channels}, -1, 1, 34);
  std::vector<Tensor> first;  // per case: y, mean, variance, dbeta
  testing::expect_same_bits_on_threads([&] {
    std::vector<Tensor> got;
    for (int which = 0; which < 3; ++which) {  // plain, fused ReLU, beta alone
      GradientTape tape;
      if (which < 2) tape.watch(x), tape.watch(gamma);
      tape.watch(beta);
      const ops::BatchNormResult r = ops::batch_norm_training(x, gamma, beta, 1e-3f, which == 1);
      const Tensor target = ops::matmul(ops::reshape(r.y, {1, r.y.size()}), ops::reshape(dy, {dy.size(), 1}));
      const std::vector<Tensor> g = which < 2 ? tape.gradient(target, {x, gamma, beta}) : tape.gradient(target, {beta});
      got.insert(got.end(), {r.y, r.mean, r.variance, g.back()});
      if (which < 2) got.insert(got.end(), {g[0], g[1]});
    }
    if (first.empty()) first = got;
    return got;
  });
  ASSERT_EQ(first.size(), 16u);
  const std::vector<float> xv = x.to_vector(), dyv = dy.to_vector();
  for (const size_t at : {size_t{0}, size_t{6}, size_t{12}}) {
    const std::vector<float> y = first[at].to_vector(), mean = first[at + 1].to_vector();
    const std::vector<float> variance = first[at + 2].to_vector(), dbeta = first[at + 3].to_vector();
    for (int64_t c = 0; c < channels; ++c) {
      double sum = 0, squares = 0, gated = 0, gated_xc = 0;
      for (int64_t r = 0; r < rows; ++r) sum += static_cast<double>(xv[r * channels + c]);
      const double m = sum / static_cast<double>(rows);
      for (int64_t r = 0; r < rows; ++r) {
        const double d = static_cast<double>(xv[r * channels + c]) - m;
        squares = std::fma(d, d, squares);  // as batch_norm.cc's moments
        const bool passes = at != 6 || y[r * channels + c] > 0.0f;  // the fused ReLU's gate
        const float g = passes ? dyv[r * channels + c] : 0.0f;
        gated += static_cast<double>(g);
        gated_xc += static_cast<double>(g * (xv[r * channels + c] - mean[c]));
      }
      ASSERT_EQ(mean[c], static_cast<float>(m)) << "case " << at << ", channel " << c;
      ASSERT_EQ(variance[c], static_cast<float>(squares / static_cast<double>(rows))) << "case " << at << ", channel " << c;
      ASSERT_EQ(dbeta[c], static_cast<float>(gated)) << "case " << at << ", channel " << c;
      if (at == 12) continue;  // beta alone: no dgamma
      const double inv_std = 1.0 / std::sqrt(static_cast<double>(variance[c]) + 1e-3f);
      ASSERT_EQ(first[at + 5].to_vector()[c], static_cast<float>(gated_xc * inv_std)) << "dgamma, case " << at << ", channel " << c;
    }
  }
}
}  // namespace
}  // namespace keel
