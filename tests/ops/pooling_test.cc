// max_pool2d, avg_pool2d, global_avg_pool2d: hand-computed forward values (TensorFlow's SAME rules:
// padded positions never win a max and do not count in an average), tie routing, central-difference
// gradients, abstract-vs-real ledger equality, shape errors, and PyTorch golden values
// (tests/golden/conv_small.json, from bench/golden_conv.py).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "framework/autodiff/tape.h"
#include "framework/core/random.h"
#include "framework/ops/ops.h"
#include "framework/ops/pooling.h"
#include "tests/support/golden.h"
#include "tests/support/grad_check.h"
#include "tests/support/thread_checks.h"

namespace keel {
namespace {

using ops::Padding;
using testing::expect_abstract_matches_real;
using testing::expect_gradients_match;
using testing::host;
using testing::random_host;

std::vector<float> pooling_iota(int64_t n, float start = 1) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<float>(i);
  return v;
}

// Distinct values 0.05 apart in shuffled order: no ties, and no central-difference step (< 0.01)
// can change which element is a window's max.
Tensor distinct_host(const Shape& shape, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(num_elements(shape)));
  std::iota(v.begin(), v.end(), 0.0f);
  Rng rng(seed);
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.next_below(i)]);
  for (float& x : v) x = (x - static_cast<float>(v.size()) / 2) * 0.05f;
  return host(shape, v);
}

// The gradient of sum(y * dy) w.r.t. x for a pooling op f.
Tensor pool_grad(const std::function<Tensor(const Tensor&)>& f, const Tensor& x, const Tensor& dy) {
  GradientTape tape;
  tape.watch(x);
  Tensor y = f(x);
  Tensor target = ops::matmul(ops::reshape(y, {1, y.size()}), ops::reshape(dy, {dy.size(), 1}));
  return tape.gradient(target, {x})[0];
}

const testing::GradCheckOptions kPoolTol = testing::tolerances("pool", 1e-3, 1e-4, 1e-3);

// --- max_pool2d ---

TEST(MaxPool2dTest, ValidByHand) {
  // 4x4 = 1..16, 2x2 windows, stride 2: the bottom-right of each window.
  Tensor y = ops::max_pool2d(host({1, 4, 4, 1}, pooling_iota(16)), {2, 2}, {2, 2}, Padding::valid);
  EXPECT_EQ(y.shape(), (Shape{1, 2, 2, 1}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{6, 8, 14, 16}));
}

TEST(MaxPool2dTest, SameStride2OddSizePadsBottomRight) {
  // 5x5 = 1..25, 2x2 stride 2 SAME: out 3, pad 0 top / 1 bottom. Row windows {0,1}, {2,3}, {4}.
  Tensor y = ops::max_pool2d(host({1, 5, 5, 1}, pooling_iota(25)), {2, 2}, {2, 2}, Padding::same);
  EXPECT_EQ(y.shape(), (Shape{1, 3, 3, 1}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{7, 9, 10, 17, 19, 20, 22, 24, 25}));
}

TEST(MaxPool2dTest, SamePaddingNeverWinsTheMax) {
  // All negative: if padded positions counted as 0, windows touching the padding would give 0.
  // 4x4 = -(1..16), 3x3 stride 2 SAME: out 2, pad 0 top / 1 bottom; row and column windows {0,1,2}, {2,3}.
  std::vector<float> v = pooling_iota(16);
  for (float& x : v) x = -x;
  Tensor y = ops::max_pool2d(host({1, 4, 4, 1}, v), {3, 3}, {2, 2}, Padding::same);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{-1, -3, -9, -11}));
}

TEST(MaxPool2dTest, ChannelsArePooledIndependently) {
  // 1x2x2x2: channel 0 = 1..4 at pixels, channel 1 = 4..1.
  Tensor y = ops::max_pool2d(host({1, 2, 2, 2}, {1, 4, 2, 3, 3, 2, 4, 1}), {2, 2}, {1, 1}, Padding::valid);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{4, 4}));
  Tensor dx = pool_grad([](const Tensor& x) { return ops::max_pool2d(x, {2, 2}, {1, 1}, Padding::valid); },
                        host({1, 2, 2, 2}, {1, 4, 2, 3, 3, 2, 4, 1}), host({1, 1, 1, 2}, {10, 20}));
  EXPECT_EQ(dx.to_vector(), (std::vector<float>{0, 20, 0, 0, 0, 0, 10, 0}));
}

TEST(MaxPool2dTest, BackwardRoutesTiesToTheFirstMax) {
  auto pool2 = [](const Tensor& x) { return ops::max_pool2d(x, {2, 2}, {2, 2}, Padding::valid); };
  Tensor one = host({1, 1, 1, 1}, {1});
  // All four equal: the gradient goes to (0, 0) only.
  EXPECT_EQ(pool_grad(pool2, host({1, 2, 2, 1}, {7, 7, 7, 7}), one).to_vector(), (std::vector<float>{1, 0, 0, 0}));
  // A tie between (0, 1) and (1, 0): row-major order picks (0, 1).
  EXPECT_EQ(pool_grad(pool2, host({1, 2, 2, 1}, {0, 3, 3, 1}), one).to_vector(), (std::vector<float>{0, 1, 0, 0}));
}

TEST(MaxPool2dTest, OverlappingWindowsAddTheirGradients) {
  // [1 5 2], windows of 2 with stride 1: both windows pick the 5.
  Tensor dx = pool_grad([](const Tensor& x) { return ops::max_pool2d(x, {1, 2}, {1, 1}, Padding::valid); },
                        host({1, 1, 3, 1}, {1, 5, 2}), host({1, 1, 2, 1}, {1, 2}));
  EXPECT_EQ(dx.to_vector(), (std::vector<float>{0, 3, 0}));
}

TEST(MaxPool2dTest, GradientMatchesCentralDifferences) {
  struct Config {
    Shape x;
    std::array<int, 2> pool, strides;
    Padding padding;
  };
  const std::vector<Config> configs = {
      {{2, 4, 4, 3}, {2, 2}, {2, 2}, Padding::valid},
      {{1, 5, 6, 2}, {3, 3}, {2, 2}, Padding::same},   // overlapping windows, padding on both sides
      {{1, 5, 5, 2}, {2, 2}, {2, 2}, Padding::same},   // asymmetric padding
      {{2, 5, 6, 2}, {3, 2}, {1, 2}, Padding::valid},  // non-square pool and strides
  };
  for (size_t i = 0; i < configs.size(); ++i) {
    const Config c = configs[i];
    auto opts = kPoolTol;
    opts.name = "max_pool2d config " + std::to_string(i);
    expect_gradients_match([c](const std::vector<Tensor>& in) { return ops::max_pool2d(in[0], c.pool, c.strides, c.padding); },
                           {distinct_host(c.x, 60 + i)}, opts);
  }
}

TEST(MaxPool2dTest, AbstractRunChargesLikeRealRun) {
  expect_abstract_matches_real([](const std::vector<Tensor>& in) { return ops::max_pool2d(in[0], {3, 3}, {2, 2}, Padding::same); },
                               {random_host({2, 5, 6, 3}, -1, 1, 61)});
}

// --- avg_pool2d ---

TEST(AvgPool2dTest, ValidByHand) {
  // 4x4 = 1..16, 2x2 stride 2: means of [1 2 5 6] = 3.5, [3 4 7 8] = 5.5, 11.5, 13.5.
  Tensor y = ops::avg_pool2d(host({1, 4, 4, 1}, pooling_iota(16)), {2, 2}, {2, 2}, Padding::valid);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{3.5f, 5.5f, 11.5f, 13.5f}));
}

TEST(AvgPool2dTest, SameDividesByTheValidCount) {
  // [1 2 3 4 5], width-2 windows, stride 2 SAME: pad 0 left / 1 right -> [1 2], [3 4], [5]: 1.5, 3.5, 5
  // (not 2.5, which counting the padded zero would give).
  Tensor y = ops::avg_pool2d(host({1, 1, 5, 1}, pooling_iota(5)), {1, 2}, {1, 2}, Padding::same);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{1.5f, 3.5f, 5.0f}));
  // 3x3 = 1..9, 3x3 stride 1 SAME: corner (0, 0) averages [1 2 4 5] = 3, edge (0, 1) [1..6] = 3.5, centre 5.
  Tensor z = ops::avg_pool2d(host({1, 3, 3, 1}, pooling_iota(9)), {3, 3}, {1, 1}, Padding::same);
  EXPECT_EQ(z.to_vector(), (std::vector<float>{3, 3.5f, 4, 4.5f, 5, 5.5f, 6, 6.5f, 7}));
}

TEST(AvgPool2dTest, BackwardSpreadsOverValidPositions) {
  // [1 2 3 4 5], width-2 windows stride 2 SAME, dy = [1 1 1]: 1/2 to each of the first four, 1 to the last.
  Tensor dx = pool_grad([](const Tensor& x) { return ops::avg_pool2d(x, {1, 2}, {1, 2}, Padding::same); },
                        host({1, 1, 5, 1}, pooling_iota(5)), host({1, 1, 3, 1}, {1, 1, 1}));
  EXPECT_EQ(dx.to_vector(), (std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f, 1.0f}));
}

TEST(AvgPool2dTest, GradientMatchesCentralDifferences) {
  struct Config {
    Shape x;
    std::array<int, 2> pool, strides;
    Padding padding;
  };
  const std::vector<Config> configs = {
      {{2, 4, 4, 3}, {2, 2}, {2, 2}, Padding::valid},
      {{1, 5, 5, 2}, {2, 3}, {1, 2}, Padding::valid},
      {{1, 5, 6, 2}, {3, 3}, {2, 2}, Padding::same},
      {{2, 4, 4, 3}, {2, 2}, {1, 1}, Padding::same},
  };
  for (size_t i = 0; i < configs.size(); ++i) {
    const Config c = configs[i];
    auto opts = kPoolTol;
    opts.name = "avg_pool2d config " + std::to_string(i);
    expect_gradients_match([c](const std::vector<Tensor>& in) { return ops::avg_pool2d(in[0], c.pool, c.strides, c.padding); },
                           {random_host(c.x, -1, 1, 70 + i)}, opts);
  }
}

TEST(AvgPool2dTest, AbstractRunChargesLikeRealRun) {
  expect_abstract_matches_real([](const std::vector<Tensor>& in) { return ops::avg_pool2d(in[0], {2, 2}, {2, 2}, Padding::same); },
                               {random_host({2, 5, 5, 3}, -1, 1, 71)});
}

// --- shape rule and errors (both pools) ---

TEST(Pool2dTest, OutputShapeRule) {
  EXPECT_EQ(ops::pool2d_output_shape({8, 28, 28, 16}, {2, 2}, {2, 2}, Padding::valid), (Shape{8, 14, 14, 16}));
  EXPECT_EQ(ops::pool2d_output_shape({8, 7, 7, 16}, {2, 2}, {2, 2}, Padding::valid), (Shape{8, 3, 3, 16}));
  EXPECT_EQ(ops::pool2d_output_shape({8, 7, 7, 16}, {2, 2}, {2, 2}, Padding::same), (Shape{8, 4, 4, 16}));
  EXPECT_EQ(ops::pool2d_output_shape({-1, 9, 10, 3}, {3, 3}, {3, 3}, Padding::same), (Shape{-1, 3, 4, 3}));
}

TEST(Pool2dTest, ShapeErrorsThrowInvalidArgument) {
  Tensor x = Tensor::zeros({1, 4, 4, 2});
  for (auto pool : {ops::max_pool2d, ops::avg_pool2d}) {
    EXPECT_NO_THROW(pool(x, {2, 2}, {2, 2}, Padding::valid));
    EXPECT_THROW(pool(Tensor::zeros({4, 4, 2}), {2, 2}, {2, 2}, Padding::valid), std::invalid_argument);
    EXPECT_THROW(pool(x, {0, 2}, {2, 2}, Padding::valid), std::invalid_argument);
    EXPECT_THROW(pool(x, {2, 2}, {2, 0}, Padding::valid), std::invalid_argument);
    EXPECT_THROW(pool(x, {5, 2}, {1, 1}, Padding::valid), std::invalid_argument);  // window taller than the input
    EXPECT_NO_THROW(pool(x, {5, 2}, {1, 1}, Padding::same));
  }
}

// --- global_avg_pool2d ---

TEST(GlobalAvgPool2dTest, ForwardByHand) {
  // (2, 2, 1, 2): image 0 channel 0 = [1 3] -> 2, channel 1 = [2 4] -> 3; image 1 = [10 30], [20 40].
  Tensor y = ops::global_avg_pool2d(host({2, 2, 1, 2}, {1, 2, 3, 4, 10, 20, 30, 40}));
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{2, 3, 20, 30}));
}

TEST(GlobalAvgPool2dTest, GradientMatchesCentralDifferences) {
  expect_gradients_match([](const std::vector<Tensor>& in) { return ops::global_avg_pool2d(in[0]); },
                         {random_host({2, 3, 4, 5}, -1, 1, 80)}, testing::tolerances("global_avg_pool2d", 1e-2, 1e-4, 1e-3));
}

TEST(GlobalAvgPool2dTest, AbstractRunChargesLikeRealRun) {
  expect_abstract_matches_real([](const std::vector<Tensor>& in) { return ops::global_avg_pool2d(in[0]); },
                               {random_host({2, 3, 4, 5}, -1, 1, 81)});
}

TEST(GlobalAvgPool2dTest, ErrorsThrowInvalidArgument) {
  EXPECT_THROW(ops::global_avg_pool2d(Tensor::zeros({2, 3, 4})), std::invalid_argument);
  EXPECT_THROW(ops::global_avg_pool2d(Tensor::zeros({2, 0, 4, 3})), std::invalid_argument);
}

// --- PyTorch golden values ---

using nlohmann::json;

const json& pooling_golden() { return testing::load_golden("conv_small.json"); }

using testing::tensor_of;

using testing::expect_matches_golden;

void check_pool_cases(const char* key, Tensor (*pool)(const Tensor&, std::array<int, 2>, std::array<int, 2>, Padding)) {
  ASSERT_NO_THROW(pooling_golden());
  ASSERT_GE(pooling_golden().at(key).size(), 3u) << key;
  for (const json& c : pooling_golden().at(key)) {
    const std::string name = std::string(key) + " " + c.at("name").get<std::string>();
    const auto p = c.at("pool").get<std::array<int, 2>>();
    const auto s = c.at("strides").get<std::array<int, 2>>();
    const Padding padding = c.at("padding").get<std::string>() == "same" ? Padding::same : Padding::valid;
    auto f = [&](const Tensor& x) { return pool(x, p, s, padding); };
    Tensor x = tensor_of(c.at("x"));
    expect_matches_golden(f(x), c.at("y"), name + " y");
    expect_matches_golden(pool_grad(f, x, tensor_of(c.at("dy"))), c.at("dx"), name + " dx");
  }
}

TEST(PoolingGoldenTest, MaxPoolMatchesPyTorch) { check_pool_cases("max_pool2d", ops::max_pool2d); }
TEST(PoolingGoldenTest, AvgPoolMatchesPyTorch) { check_pool_cases("avg_pool2d", ops::avg_pool2d); }

TEST(PoolingGoldenTest, GlobalAvgPoolMatchesPyTorch) {
  ASSERT_NO_THROW(pooling_golden());
  for (const json& c : pooling_golden().at("global_avg_pool2d")) {
    Tensor x = tensor_of(c.at("x"));
    expect_matches_golden(ops::global_avg_pool2d(x), c.at("y"), "global_avg_pool2d y");
    expect_matches_golden(pool_grad([](const Tensor& t) { return ops::global_avg_pool2d(t); }, x, tensor_of(c.at("dy"))),
                          c.at("dx"), "global_avg_pool2d dx");
  }
}

// --- speed (printed, not asserted) ---

TEST(PoolingSpeed, PrintsThroughput) {
  Tensor x = random_host({32, 32, 32, 64}, -1, 1, 90), dy = random_host({32, 16, 16, 64}, -1, 1, 91);
  auto time_ms = [](auto&& fn) {
    fn();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  auto maxp = [](const Tensor& t) { return ops::max_pool2d(t, {2, 2}, {2, 2}, Padding::valid); };
  auto avgp = [](const Tensor& t) { return ops::avg_pool2d(t, {2, 2}, {2, 2}, Padding::valid); };
  const double mf = time_ms([&] { maxp(x); }), mb = time_ms([&] { pool_grad(maxp, x, dy); });
  const double af = time_ms([&] { avgp(x); }), ab = time_ms([&] { pool_grad(avgp, x, dy); });
  const double mb_bytes = x.bytes() / 1e6;
  std::printf("[ speed    ] 2x2 pools on (32,32,32,64) (%.0f MB): max fwd %.2f ms, fwd+bwd %.2f ms; avg fwd %.2f ms, fwd+bwd %.2f ms\n",
              mb_bytes, mf, mb, af, ab);
  SUCCEED();
}

// Max and average pooling, forward and backward, image by image on 1 to 4 threads: the same bits.
TEST(PoolingThreadsTest, TheSameBitsOnOneToFourThreads) {
  const Tensor x = testing::random_host({9, 14, 14, 20}, -1, 1, 31), dy = testing::random_host({9, 7, 7, 20}, -1, 1, 32);
  testing::expect_same_bits_on_threads([&] {
    std::vector<Tensor> got;
    for (bool max : {true, false}) {
      GradientTape tape;
      tape.watch(x);
      const Tensor y = max ? ops::max_pool2d(x, {3, 3}, {2, 2}, ops::Padding::same) : ops::avg_pool2d(x, {3, 3}, {2, 2}, ops::Padding::same);
      const Tensor target = ops::matmul(ops::reshape(y, {1, y.size()}), ops::reshape(dy, {dy.size(), 1}));
      got.push_back(tape.gradient(target, {x})[0]);
      got.push_back(y);
    }
    return got;
  });
}

}  // namespace
}  // namespace keel
