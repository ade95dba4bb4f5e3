// conv2d: hand-computed forward values (TensorFlow's asymmetric SAME padding, dilation,
// channel layout), a direct-loop reference on inputs large enough to be processed in several im2col
// chunks, central-difference gradients, abstract-vs-real ledger equality, shape errors, and PyTorch
// golden values (tests/golden/conv_small.json, from bench/golden_conv.py).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "framework/autodiff/tape.h"
#include "framework/device/context.h"
#include "framework/device/device_spec.h"
#include "framework/device/ledger.h"
#include "framework/layers/conv_layers.h"
#include "framework/ops/conv.h"
#include "framework/ops/pooling.h"
#include "framework/ops/precision.h"
#include "framework/ops/ops.h"
#include "tests/support/conv_backend.h"
#include "tests/support/conv_reference.h"
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

using BackendScope = testing::ConvBackendScope;
using testing::check_against_direct;
using testing::ConvConfig;
constexpr auto& kBackends = testing::kConvBackends;
const char* backend_name(ops::ConvBackend b) { return testing::conv_backend_name(b); }

// conv2d is bilinear: central differences are exact up to float rounding.
const testing::GradCheckOptions kConvTol = testing::tolerances("conv2d", 1e-2, 1e-4, 1e-3);

std::vector<float> iota(int64_t n, float start = 1) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<float>(i);
  return v;
}

// --- forward by hand ---

TEST(Conv2dTest, ValidStride1ByHand) {
  // x 3x3 = [1 2 3; 4 5 6; 7 8 9], kernel 2x2 = [1 2; 3 4]:
  // y00 = 1*1 + 2*2 + 4*3 + 5*4 = 37, y01 = 2 + 6 + 15 + 24 = 47, y10 = 67, y11 = 77.
  Tensor y = ops::conv2d(host({1, 3, 3, 1}, iota(9)), host({2, 2, 1, 1}, {1, 2, 3, 4}), {1, 1}, Padding::valid);
  EXPECT_EQ(y.shape(), (Shape{1, 2, 2, 1}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{37, 47, 67, 77}));
}

TEST(Conv2dTest, SameStride2EvenWidthPadsOnlyOnTheRight) {
  // W 6, k 3, s 2: out 3, total pad max(2*2 + 3 - 6, 0) = 1 -> left 0, right 1 (TensorFlow).
  // Windows start at 0, 2, 4: [1 2 3]·[1 10 100] = 321, [3 4 5] -> 543, [5 6 0] -> 65.
  Tensor y = ops::conv2d(host({1, 1, 6, 1}, iota(6)), host({1, 3, 1, 1}, {1, 10, 100}), {1, 2}, Padding::same);
  EXPECT_EQ(y.shape(), (Shape{1, 1, 3, 1}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{321, 543, 65}));
}

TEST(Conv2dTest, SameStride2OddWidthPadsSymmetrically) {
  // W 5, k 3, s 2: out 3, total pad 2 -> 1 and 1. Windows start at -1, 1, 3.
  Tensor y = ops::conv2d(host({1, 1, 5, 1}, iota(5)), host({1, 3, 1, 1}, {1, 10, 100}), {1, 2}, Padding::same);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{0 + 10 + 200, 2 + 30 + 400, 4 + 50 + 0}));
}

TEST(Conv2dTest, SameStride2OddTotalPutsTheExtraColumnOnTheRight) {
  // W 5, k 4, s 2: out 3, total pad max(2*2 + 4 - 5, 0) = 3 -> left 1, right 2. Windows start at -1, 1, 3.
  Tensor y = ops::conv2d(host({1, 1, 5, 1}, iota(5)), host({1, 4, 1, 1}, {1, 10, 100, 1000}), {1, 2}, Padding::same);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{3210, 5432, 54}));
}

TEST(Conv2dTest, SameStride2AlongHeightPadsOnlyAtTheBottom) {
  // x 4x4 = 1..16, 3x3 ones, stride 2 SAME: out 2x2, pad top 0 / bottom 1, left 0 / right 1.
  // y00 = sum rows 0-2 x cols 0-2 = 54; y01 = rows 0-2 x cols 2-3 = 45; y10 = rows 2-3 x cols 0-2 = 72;
  // y11 = rows 2-3 x cols 2-3 = 54. (Padding on top/left instead would give 24, 39, 66, 99.)
  Tensor y = ops::conv2d(host({1, 4, 4, 1}, iota(16)), Tensor::full({3, 3, 1, 1}, 1.0f), {2, 2}, Padding::same);
  EXPECT_EQ(y.shape(), (Shape{1, 2, 2, 1}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{54, 45, 72, 54}));
}

TEST(Conv2dTest, Dilation2ValidAndSame) {
  // Taps 2 apart: y[j] = x[j] + 10 x[j+2] + 100 x[j+4] (VALID, extent 5: 7 -> 3).
  Tensor k = host({1, 3, 1, 1}, {1, 10, 100});
  Tensor valid = ops::conv2d(host({1, 1, 7, 1}, iota(7)), k, {1, 1}, Padding::valid, {1, 2});
  EXPECT_EQ(valid.to_vector(), (std::vector<float>{531, 642, 753}));
  // SAME: total pad 4 -> 2 and 2: y[j] = x[j-2] + 10 x[j] + 100 x[j+2].
  Tensor same = ops::conv2d(host({1, 1, 7, 1}, iota(7)), k, {1, 1}, Padding::same, {1, 2});
  EXPECT_EQ(same.to_vector(), (std::vector<float>{310, 420, 531, 642, 753, 64, 75}));
  // Along the height too.
  Tensor tall = ops::conv2d(host({1, 7, 1, 1}, iota(7)), host({3, 1, 1, 1}, {1, 10, 100}), {1, 1}, Padding::valid, {2, 1});
  EXPECT_EQ(tall.to_vector(), (std::vector<float>{531, 642, 753}));
}

TEST(Conv2dTest, ChannelsFollowHwioLayout) {
  // 1x1: y[o] = sum_c x[c] * kernel[0, 0, c, o]; kernel (1, 1, 2, 3) = [[1 2 3], [4 5 6]].
  Tensor y = ops::conv2d(host({1, 1, 1, 2}, {1, 2}), host({1, 1, 2, 3}, {1, 2, 3, 4, 5, 6}), {1, 1}, Padding::valid);
  EXPECT_EQ(y.shape(), (Shape{1, 1, 1, 3}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{9, 12, 15}));
  // 2x2 kernel over a 2x2x2 input: a dot product in (h, w, c) order; x = 1..8, kernel = 8..1.
  // 1*8 + 2*7 + ... + 8*1 = 120 (a mirrored order would give 1*1 + ... + 8*8 = 204).
  Tensor z = ops::conv2d(host({1, 2, 2, 2}, iota(8)), host({2, 2, 2, 1}, {8, 7, 6, 5, 4, 3, 2, 1}), {1, 1}, Padding::valid);
  EXPECT_EQ(z.to_vector(), (std::vector<float>{120}));
}

TEST(Conv2dTest, OutputShapeRule) {
  EXPECT_EQ(ops::conv2d_output_shape({8, 28, 28, 3}, {5, 5, 3, 16}, {1, 1}, Padding::valid), (Shape{8, 24, 24, 16}));
  EXPECT_EQ(ops::conv2d_output_shape({8, 28, 27, 3}, {3, 3, 3, 16}, {2, 2}, Padding::same), (Shape{8, 14, 14, 16}));
  EXPECT_EQ(ops::conv2d_output_shape({-1, 10, 10, 3}, {3, 3, 3, 4}, {3, 3}, Padding::valid), (Shape{-1, 3, 3, 4}));
  EXPECT_EQ(ops::conv2d_output_shape({1, 10, 10, 3}, {3, 3, 3, 4}, {1, 1}, Padding::valid, {2, 2}), (Shape{1, 6, 6, 4}));
  const ops::WindowAxis a = ops::window_axis("t", 6, 3, 2, 1, Padding::same);
  EXPECT_EQ(a.output, 3);
  EXPECT_EQ(a.pad_before, 0);
  EXPECT_EQ(a.pad_after, 1);
}

// --- against a direct-loop reference, including several im2col chunks ---

TEST(Conv2dTest, MatchesDirectLoopsOnSmallConfigs) {
  const std::vector<ConvConfig> configs = {
      {{2, 7, 6, 3}, {3, 3, 3, 4}, {1, 1}, Padding::valid, {1, 1}},
      {{2, 7, 6, 3}, {3, 3, 3, 4}, {2, 2}, Padding::same, {1, 1}},
      {{1, 8, 9, 2}, {2, 4, 2, 3}, {3, 2}, Padding::same, {1, 1}},
      {{1, 9, 9, 2}, {3, 3, 2, 2}, {1, 1}, Padding::same, {2, 3}},
      {{2, 9, 8, 2}, {3, 2, 2, 2}, {2, 1}, Padding::valid, {2, 2}},
      {{3, 4, 5, 6}, {1, 1, 6, 2}, {1, 1}, Padding::same, {1, 1}},
      {{3, 5, 5, 6}, {1, 1, 6, 2}, {2, 2}, Padding::same, {1, 1}},
      {{1, 2, 3, 1}, {5, 5, 1, 2}, {1, 1}, Padding::same, {1, 1}},  // kernel larger than the image
  };
  for (size_t i = 0; i < configs.size(); ++i) check_against_direct(configs[i], 100 + 10 * i, "config " + std::to_string(i));
}

// Convolutions large enough for oneDNN (ops/conv_onednn.h: 256 output pixels or more): strided,
// dilated, pointwise, and a 3-channel stem (dx on im2col, dkernel on oneDNN).
TEST(Conv2dTest, MatchesDirectLoopsWhereOneDnnRuns) {
  const std::vector<ConvConfig> configs = {
      {{2, 16, 16, 16}, {3, 3, 16, 8}, {1, 1}, Padding::same, {1, 1}},
      {{2, 33, 31, 16}, {3, 3, 16, 24}, {2, 2}, Padding::same, {1, 1}},
      {{1, 24, 24, 16}, {3, 3, 16, 8}, {1, 1}, Padding::same, {2, 2}},
      {{2, 20, 20, 32}, {1, 1, 32, 16}, {1, 1}, Padding::valid, {1, 1}},
      {{2, 40, 40, 3}, {7, 7, 3, 16}, {2, 2}, Padding::valid, {1, 1}},
  };
  for (size_t i = 0; i < configs.size(); ++i) check_against_direct(configs[i], 300 + 10 * i, "onednn config " + std::to_string(i));
}

// Single-pixel inputs whose window is padding but for one tap (conv_geometry.h's single_tap: the
// 1x1 maps deep in a ResNet on 32x32 images): one GEMM on that tap's slice of the kernel. 3x3 and
// 5x3 "same", dilated, an even kernel (the tap off-centre), strided, and a batch of 300 (oneDNN's
// size otherwise).
TEST(Conv2dTest, SingleTapConvolutionsMatchDirectLoops) {
  const std::vector<ConvConfig> configs = {
      {{5, 1, 1, 8}, {3, 3, 8, 6}, {1, 1}, Padding::same, {1, 1}},
      {{3, 1, 1, 4}, {5, 3, 4, 5}, {2, 2}, Padding::same, {1, 1}},
      {{2, 1, 1, 3}, {3, 3, 3, 2}, {1, 1}, Padding::same, {2, 3}},
      {{4, 1, 1, 5}, {4, 2, 5, 3}, {1, 1}, Padding::same, {1, 1}},
      {{300, 1, 1, 16}, {3, 3, 16, 8}, {1, 1}, Padding::same, {1, 1}},
  };
  for (size_t i = 0; i < configs.size(); ++i) check_against_direct(configs[i], 500 + 10 * i, "single tap " + std::to_string(i));
}

// ... bit for bit the pointwise convolution of the tap's (Cin, Cout) slice, and the kernel gradient is
// exactly zero at every other tap.
TEST(Conv2dTest, ASingleTapConvolutionIsThePointwiseOneOfItsTap) {
  const Tensor x = random_host({6, 1, 1, 32}, -1, 1, 600), k = random_host({3, 3, 32, 24}, -1, 1, 601);
  const Tensor dy = random_host({6, 1, 1, 24}, -1, 1, 602);
  const std::vector<float> kv = k.to_vector();
  const int64_t slice = 32 * 24, centre = 4 * slice;
  const Tensor tap = Tensor::from_vector({1, 1, 32, 24}, std::vector<float>(kv.begin() + centre, kv.begin() + centre + slice));
  for (ops::ConvBackend b : kBackends) {
    SCOPED_TRACE(backend_name(b));
    const BackendScope backend(b);
    EXPECT_EQ(ops::conv2d(x, k, {1, 1}, Padding::same).to_vector(), ops::conv2d(x, tap, {1, 1}, Padding::same).to_vector());
    const std::vector<Tensor> got = testing::conv_gradients(x, k, dy, {1, 1}, Padding::same, {1, 1});
    const std::vector<Tensor> want = testing::conv_gradients(x, tap, dy, {1, 1}, Padding::same, {1, 1});
    EXPECT_EQ(got[0].to_vector(), want[0].to_vector()) << "dx";
    const std::vector<float> dk = got[1].to_vector(), dk_tap = want[1].to_vector();
    EXPECT_EQ(std::vector<float>(dk.begin() + centre, dk.begin() + centre + slice), dk_tap) << "dkernel at the tap";
    for (int64_t i = 0; i < static_cast<int64_t>(dk.size()); ++i) {
      if (i >= centre && i < centre + slice) continue;
      ASSERT_EQ(dk[static_cast<size_t>(i)], 0.0f) << "dkernel at " << i;
      ASSERT_FALSE(std::signbit(dk[static_cast<size_t>(i)])) << "dkernel at " << i;
    }
  }
}

TEST(Conv2dTest, MatchesDirectLoopsAcrossIm2colChunks) {
  // 8 * 40 * 40 output pixels x 144-wide patches = 1.8M floats: several chunks, the last one partial.
  check_against_direct({{8, 40, 40, 16}, {3, 3, 16, 8}, {1, 1}, Padding::same, {1, 1}}, 200, "chunked");
}

// --- gradients by central differences ---

void check_conv_gradients(const ConvConfig& c, uint64_t seed) {
  // These few-pixel shapes run on im2col whichever backend is set (ops/conv_onednn.h's 256 pixels);
  // oneDNN's gradients are checked against direct loops above.
  auto f = [c](const std::vector<Tensor>& in) { return ops::conv2d(in[0], in[1], c.strides, c.padding, c.dilation); };
  expect_gradients_match(f, {random_host(c.x, -1, 1, seed), random_host(c.kernel, -1, 1, seed + 1)}, kConvTol);
}

TEST(Conv2dTest, GradientValidStride1) { check_conv_gradients({{2, 5, 5, 3}, {3, 3, 3, 2}, {1, 1}, Padding::valid, {1, 1}}, 1); }
TEST(Conv2dTest, GradientSameStride2Even) { check_conv_gradients({{1, 6, 6, 2}, {3, 3, 2, 2}, {2, 2}, Padding::same, {1, 1}}, 3); }
TEST(Conv2dTest, GradientSameStride2OddNonSquareKernel) {
  check_conv_gradients({{1, 5, 7, 2}, {2, 3, 2, 3}, {2, 2}, Padding::same, {1, 1}}, 5);
}
TEST(Conv2dTest, GradientNonSquareStrides) { check_conv_gradients({{1, 6, 5, 2}, {3, 2, 2, 2}, {1, 2}, Padding::same, {1, 1}}, 7); }
TEST(Conv2dTest, GradientDilation2) { check_conv_gradients({{1, 6, 6, 2}, {3, 2, 2, 2}, {1, 1}, Padding::same, {2, 2}}, 9); }
TEST(Conv2dTest, GradientDilationValid) { check_conv_gradients({{1, 7, 6, 2}, {2, 2, 2, 2}, {1, 1}, Padding::valid, {3, 2}}, 11); }
TEST(Conv2dTest, GradientPointwise) { check_conv_gradients({{2, 3, 4, 3}, {1, 1, 3, 2}, {1, 1}, Padding::valid, {1, 1}}, 13); }
TEST(Conv2dTest, GradientSingleTap) { check_conv_gradients({{3, 1, 1, 3}, {3, 3, 3, 2}, {1, 1}, Padding::same, {1, 1}}, 17); }
TEST(Conv2dTest, GradientPointwiseStride2) { check_conv_gradients({{1, 5, 4, 3}, {1, 1, 3, 2}, {2, 2}, Padding::same, {1, 1}}, 15); }

TEST(Conv2dTest, GradientOfEachInputAlone) {
  const ConvConfig c{{1, 5, 5, 2}, {3, 3, 2, 2}, {2, 2}, Padding::same, {1, 1}};
  auto f = [c](const std::vector<Tensor>& in) { return ops::conv2d(in[0], in[1], c.strides, c.padding, c.dilation); };
  Tensor x = random_host(c.x, -1, 1, 17), k = random_host(c.kernel, -1, 1, 18);
  auto opts = kConvTol;
  opts.check_inputs = {0};
  expect_gradients_match(f, {x, k}, opts);
  opts.check_inputs = {1};
  expect_gradients_match(f, {x, k}, opts);
}

TEST(Conv2dTest, GradientThroughBiasAndAChain) {
  // conv -> bias_add -> conv: dx of the second conv feeds the first.
  auto f = [](const std::vector<Tensor>& in) {
    Tensor h = ops::bias_add(ops::conv2d(in[0], in[1], {1, 1}, Padding::same), in[2]);
    return ops::conv2d(h, in[3], {2, 2}, Padding::valid);
  };
  expect_gradients_match(f,
                         {random_host({1, 5, 5, 2}, -1, 1, 19), random_host({3, 3, 2, 3}, -1, 1, 20),
                          random_host({3}, -1, 1, 21), random_host({2, 2, 3, 2}, -1, 1, 22)},
                         testing::tolerances("conv chain", 1e-2, 1e-3, 2e-3));
}

TEST(Conv2dTest, KernelGradientOfATrainableVariableIsChargedAsGradients) {
  const BackendScope backend(ops::ConvBackend::im2col);  // whose im2col buffers are always there
  Ledger ledger(DeviceSpec::custom(1, 0));
  DeviceContext ctx;
  ctx.ledger = &ledger;
  ctx.core = 0;
  ContextScope scope(ctx);
  Tensor x = Tensor::empty({1, 4, 4, 2}, Category::inputs, "infeed:x");
  x.copy_from(random_host({1, 4, 4, 2}, -1, 1, 23));
  Tensor k = Tensor::empty({3, 3, 2, 2}, Category::parameters, "conv/kernel");
  k.copy_from(random_host({3, 3, 2, 2}, -1, 1, 24));
  k.mark_trainable_variable(true);
  GradientTape tape;
  Tensor loss = ops::reduce_sum(ops::conv2d(x, k, {1, 1}, Padding::same));
  const MemoryStat ws_before = ledger.core(0).stat(Category::workspace);
  std::vector<Tensor> g = tape.gradient(loss, {k});
  ASSERT_TRUE(g[0].defined());
  EXPECT_EQ(ledger.core(0).stat(Category::gradients).current, g[0].bytes());
  // The im2col buffers (forward and backward) were charged as workspace and released.
  EXPECT_GT(ledger.core(0).stat(Category::workspace).peak, 0);
  EXPECT_GT(ws_before.allocated, 0);
  EXPECT_EQ(ws_before.current, 0);
}

// --- planning ---

TEST(Conv2dTest, AbstractRunChargesLikeRealRun) {
  const std::vector<ConvConfig> configs = {
      {{2, 6, 5, 3}, {3, 3, 3, 4}, {2, 1}, Padding::same, {1, 1}},
      {{2, 4, 4, 3}, {1, 1, 3, 2}, {1, 1}, Padding::valid, {1, 1}},
      {{8, 40, 40, 16}, {3, 3, 16, 8}, {1, 1}, Padding::same, {1, 1}},  // several chunks
      {{2, 40, 40, 3}, {7, 7, 3, 16}, {2, 2}, Padding::valid, {1, 1}},   // oneDNN's dkernel, im2col's dx
      {{300, 1, 1, 16}, {3, 3, 16, 8}, {1, 1}, Padding::same, {1, 1}},   // single tap: no im2col workspace
      {{1, 56, 56, 64}, {3, 3, 64, 64}, {1, 1}, Padding::same, {1, 1}},  // oneDNN: y and dx in bands of rows
      {{2, 12, 12, 256}, {3, 3, 256, 256}, {1, 1}, Padding::same, {1, 1}},  // oneDNN: dkernel in channel blocks
      {{2, 16, 16, 64}, {1, 1, 64, 128}, {1, 1}, Padding::same, {1, 1}},    // oneDNN's y and dx, a product's dkernel
  };
  for (const ConvConfig& c : configs) {
    for (ops::ConvBackend b : kBackends) {
      SCOPED_TRACE(backend_name(b));
      const BackendScope backend(b);
      expect_abstract_matches_real(
          [c](const std::vector<Tensor>& in) { return ops::conv2d(in[0], in[1], c.strides, c.padding, c.dilation); },
          {random_host(c.x, -1, 1, 30), random_host(c.kernel, -1, 1, 31)});
    }
  }
  // With a bias oneDNN adds in its kernel (a primitive of its own, planned as the one that runs): 24
  // output channels (oneDNN pads the bias to 32), and in bands of rows.
  const ConvConfig with_bias[] = {{{2, 20, 20, 16}, {3, 3, 16, 24}, {1, 1}, Padding::same, {1, 1}},
                                  {{1, 56, 56, 64}, {3, 3, 64, 64}, {1, 1}, Padding::same, {1, 1}}};
  for (const ConvConfig& c : with_bias) {
    expect_abstract_matches_real(
        [c](const std::vector<Tensor>& in) { return ops::conv2d(in[0], in[1], c.strides, c.padding, c.dilation, in[2]); },
        {random_host(c.x, -1, 1, 32), random_host(c.kernel, -1, 1, 33), random_host({c.kernel[3]}, -1, 1, 34)});
  }
}

// Under bfloat16 too: dy's rounded values (im2col), oneDNN's bfloat16 workspace, and a kernel
// variable that goes into oneDNN unrounded and is rounded for an im2col dx (the 3-channel stem).
TEST(Conv2dTest, AbstractRunChargesLikeRealRunUnderBfloat16) {
  const std::vector<ConvConfig> configs = {
      {{2, 6, 5, 3}, {3, 3, 3, 4}, {2, 1}, Padding::same, {1, 1}},
      {{2, 4, 4, 3}, {1, 1, 3, 2}, {1, 1}, Padding::valid, {1, 1}},
      {{8, 40, 40, 16}, {3, 3, 16, 8}, {1, 1}, Padding::same, {1, 1}},
      {{2, 40, 40, 3}, {7, 7, 3, 16}, {2, 2}, Padding::valid, {1, 1}},
      {{2, 20, 20, 64}, {1, 1, 64, 32}, {1, 1}, Padding::valid, {1, 1}},
      {{4, 1, 1, 16}, {3, 3, 16, 8}, {1, 1}, Padding::same, {1, 1}},  // single tap: x widened whole
  };
  for (const ConvConfig& c : configs) {
    for (bool variable : {false, true}) {
      for (ops::ConvBackend b : kBackends) {
        SCOPED_TRACE(backend_name(b) + std::string(variable ? ", kernel a variable" : ""));
        const BackendScope backend(b);
        expect_abstract_matches_real(
            [c, variable](const std::vector<Tensor>& in) {
              Tensor kernel = in[1];
              kernel.mark_trainable_variable(variable);
              const ops::ComputeDTypeScope compute(DType::bfloat16);
              return ops::cast(ops::conv2d(in[0], kernel, c.strides, c.padding, c.dilation), DType::float32);
            },
            {random_host(c.x, -1, 1, 30), random_host(c.kernel, -1, 1, 31)});
      }
    }
  }
}

// --- errors ---

TEST(Conv2dTest, ShapeErrorsThrowInvalidArgument) {
  Tensor x = Tensor::zeros({1, 5, 5, 2}), k = Tensor::zeros({3, 3, 2, 4});
  EXPECT_NO_THROW(ops::conv2d(x, k, {1, 1}, Padding::valid));
  EXPECT_THROW(ops::conv2d(Tensor::zeros({5, 5, 2}), k, {1, 1}, Padding::valid), std::invalid_argument);     // rank 3 input
  EXPECT_THROW(ops::conv2d(x, Tensor::zeros({3, 3, 2}), {1, 1}, Padding::valid), std::invalid_argument);     // rank 3 kernel
  EXPECT_THROW(ops::conv2d(x, Tensor::zeros({3, 3, 3, 4}), {1, 1}, Padding::valid), std::invalid_argument);  // Cin
  EXPECT_THROW(ops::conv2d(x, k, {0, 1}, Padding::valid), std::invalid_argument);
  EXPECT_THROW(ops::conv2d(x, k, {1, -1}, Padding::same), std::invalid_argument);
  EXPECT_THROW(ops::conv2d(x, k, {1, 1}, Padding::valid, {0, 1}), std::invalid_argument);
  EXPECT_THROW(ops::conv2d(x, Tensor::zeros({6, 3, 2, 4}), {1, 1}, Padding::valid), std::invalid_argument);  // too tall
  EXPECT_THROW(ops::conv2d(x, k, {1, 1}, Padding::valid, {3, 1}), std::invalid_argument);  // extent 7 > 5
  EXPECT_NO_THROW(ops::conv2d(x, Tensor::zeros({6, 3, 2, 4}), {1, 1}, Padding::same));     // SAME always fits
  EXPECT_EQ(ops::conv2d(Tensor::zeros({0, 5, 5, 2}), k, {1, 1}, Padding::valid).shape(), (Shape{0, 3, 3, 4}));  // empty batch
  try {
    ops::conv2d(x, Tensor::zeros({3, 3, 3, 4}), {1, 1}, Padding::valid);
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("conv2d"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("channels"), std::string::npos) << e.what();
  }
}

// --- PyTorch golden values ---

using nlohmann::json;

const json& conv_golden() { return testing::load_golden("conv_small.json"); }

using testing::tensor_of;

using testing::expect_matches_golden;

Padding padding_of(const json& c) { return c.at("padding").get<std::string>() == "same" ? Padding::same : Padding::valid; }

TEST(Conv2dGoldenTest, MatchesPyTorch) {
  ASSERT_NO_THROW(conv_golden());
  ASSERT_GE(conv_golden().at("conv2d").size(), 5u);
  for (const json& c : conv_golden().at("conv2d")) {
    const std::string name = "conv2d " + c.at("name").get<std::string>();
    const auto strides = c.at("strides").get<std::array<int, 2>>();
    const auto dilation = c.at("dilation").get<std::array<int, 2>>();
    Tensor x = tensor_of(c.at("x")), k = tensor_of(c.at("kernel")), dy = tensor_of(c.at("dy"));
    expect_matches_golden(ops::conv2d(x, k, strides, padding_of(c), dilation), c.at("y"), name + " y");
    std::vector<Tensor> g = testing::conv_gradients(x, k, dy, strides, padding_of(c), dilation);
    expect_matches_golden(g[0], c.at("dx"), name + " dx");
    expect_matches_golden(g[1], c.at("dkernel"), name + " dkernel");
  }
}

// --- speed (printed, not asserted) ---

TEST(Conv2dSpeed, PrintsThroughput) {
  // A mid-sized 3x3 layer: (32, 32, 32, 32) -> 64 channels, forward and backward.
  Tensor x = random_host({32, 32, 32, 32}, -1, 1, 50), k = random_host({3, 3, 32, 64}, -1, 1, 51);
  Tensor dy = random_host({32, 32, 32, 64}, -1, 1, 52);
  const double flops = 2.0 * 32 * 32 * 32 * (3 * 3 * 32) * 64;
  auto time_ms = [](auto&& fn) {
    fn();  // warm up
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  const double fwd = time_ms([&] { ops::conv2d(x, k, {1, 1}, Padding::same); });
  const double both = time_ms([&] { testing::conv_gradients(x, k, dy, {1, 1}, Padding::same, {1, 1}); });
  std::printf("[ speed    ] conv2d 3x3 (32,32,32,32)->64: forward %.1f ms (%.1f GFLOP/s), forward+backward %.1f ms (%.1f GFLOP/s)\n",
              fwd, flops / fwd * 1e-6, both, 3 * flops / both * 1e-6);
  SUCCEED();
}

// One shape rule per op: Keras's layers ask the op (issue "One path through a training step", item 6),
// so a layer's output shape is the op's output for every geometry, and an input the op refuses is
// refused when the layer is built, not turned into a 0-sized output.
TEST(ConvShapeRuleTest, LayersGiveTheOpsOutputShapes) {
  for (const std::string padding : {"valid", "same"}) {
    for (int in : {5, 6, 7, 32}) {
      for (int k : {1, 3, 5}) {
        for (int stride : {1, 2, 3}) {
          for (int dilation : {1, 2}) {
            const Padding p = padding == "same" ? Padding::same : Padding::valid;
            Shape op;
            try {
              op = ops::conv2d_output_shape({2, in, in + 1, 3}, {k, k, 3, 4}, {stride, stride}, p, {dilation, dilation});
            } catch (const std::invalid_argument&) {
              EXPECT_THROW(Conv2D(4, k, {.strides = {stride, stride}, .padding = padding, .dilation_rate = {dilation, dilation}})
                               ->compute_output_shape({in, in + 1, 3}),
                           std::invalid_argument);
              continue;
            }
            const Shape layer = Conv2D(4, k, {.strides = {stride, stride}, .padding = padding,
                                              .dilation_rate = {dilation, dilation}})
                                    ->compute_output_shape({in, in + 1, 3});
            EXPECT_EQ(layer, (Shape{op[1], op[2], op[3]})) << padding << " in " << in << " k " << k << " s " << stride;
            if (dilation == 1) {
              const Shape pool = ops::pool2d_output_shape({2, in, in + 1, 3}, {k, k}, {stride, stride}, p);
              EXPECT_EQ(MaxPooling2D(k, stride, padding)->compute_output_shape({in, in + 1, 3}),
                        (Shape{pool[1], pool[2], pool[3]}));
            }
          }
        }
      }
    }
  }
}

TEST(ConvShapeRuleTest, ALayerRefusesAnInputTheOpRefuses) {
  EXPECT_THROW(Conv2D(4, 5)->compute_output_shape({3, 3, 1}), std::invalid_argument);
  EXPECT_THROW(MaxPooling2D(3)->compute_output_shape({2, 2, 1}), std::invalid_argument);
  EXPECT_EQ(ZeroPadding2D(2)->compute_output_shape({3, 4, 1}), (Shape{7, 8, 1}));
}

// --- threads ---

// conv2d forward and both gradients on 1 to 4 threads, in float32 on both backends and under
// bfloat16, for a 3x3 convolution spread over several im2col chunks and images, a strided one, a
// pointwise one, one oneDNN cuts into two tasks and a single-tap one: the same bits (ops/gemm.h, the
// pixel blocks and oneDNN's tasks follow the shape alone).
TEST(Conv2dTest, TheSameBitsOnOneToFourThreads) {
  struct Case {
    Shape x, kernel;
    std::array<int, 2> strides;
  };
  const Case cases[] = {{{2, 32, 32, 128}, {3, 3, 128, 48}, {1, 1}},
                        {{3, 17, 17, 24}, {3, 3, 24, 40}, {2, 2}},
                        {{2, 32, 32, 64}, {1, 1, 64, 256}, {1, 1}},
                        {{2, 6, 6, 256}, {3, 3, 256, 384}, {1, 1}},  // few pixels: im2col, then tiled columns
                        {{4, 16, 16, 128}, {3, 3, 128, 128}, {1, 1}},  // oneDNN: tasks of images, partial kernels
                        {{2, 12, 12, 256}, {3, 3, 256, 256}, {1, 1}},  // oneDNN: dkernel in 4 blocks of channels
                        {{1, 56, 56, 64}, {3, 3, 64, 64}, {1, 1}},     // oneDNN: y and dx in bands of rows
                        {{64, 1, 1, 512}, {3, 3, 512, 256}, {1, 1}}};  // single tap: one tiled GEMM
  uint64_t seed = 100;
  for (const Case& c : cases) {
    const Tensor x = random_host(c.x, -1, 1, seed++), k = random_host(c.kernel, -1, 1, seed++);
    const Shape y_shape = ops::conv2d_output_shape(c.x, c.kernel, c.strides, Padding::same, {1, 1});
    const Tensor dy = random_host(y_shape, -1, 1, seed++);
    for (DType dt : {DType::float32, DType::bfloat16}) {
      for (ops::ConvBackend b : kBackends) {
        SCOPED_TRACE(shape_string(c.x) + " " + dtype_name(dt) + " " + backend_name(b));
        const BackendScope backend(b);
        const ops::ComputeDTypeScope compute(dt);
        testing::expect_same_bits_on_threads([&] {
          std::vector<Tensor> got = testing::conv_gradients(x, k, dy, c.strides, Padding::same, {1, 1});
          got.push_back(ops::conv2d(x, k, c.strides, Padding::same, {1, 1}));
          return got;
        });
      }
    }
  }
}

}  // namespace
}  // namespace keel
