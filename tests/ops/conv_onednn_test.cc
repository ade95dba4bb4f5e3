// conv2d under bfloat16 on oneDNN (framework/ops/conv_onednn.h): its native bfloat16 kernels against
// the float32 convolution of the rounded operands (dy rounded too, for the gradients).
// Float32 oneDNN against im2col where it cuts the work into tasks of images or blocks of channels,
// and where it leaves a pointwise kernel gradient to one product. (Against direct loops, and the same
// bits on 1-4 threads for both dtypes and backends, in conv_test.cc; what replicas share, in
// shared_kernels_test.cc.)
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "framework/autodiff/tape.h"
#include "framework/device/context.h"
#include "framework/ops/conv.h"
#include "framework/ops/conv_onednn.h"
#include "framework/ops/conv_tasks.h"
#include "framework/ops/ops.h"
#include "framework/ops/precision.h"
#include "tests/support/conv_backend.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using ops::Padding;
using testing::random_host;

// Whether this CPU has oneDNN's bfloat16 convolutions (else bfloat16 ones run on im2col).
bool onednn_has_bfloat16() {
  ops::detail::ConvGeometry g;
  g.batch = 1, g.in_channels = 16, g.out_channels = 16;
  g.h = {16, 3, 1, 1, 16, 1, 1}, g.w = g.h;  // 16x16, 3x3, "same": 256 output pixels, where oneDNN runs
  return ops::detail::onednn_runs_bfloat16(g);
}

// Largest |a - b| over the largest |b|.
float relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  float scale = 0, worst = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    scale = std::max(scale, std::fabs(b[i]));
    worst = std::max(worst, std::fabs(a[i] - b[i]));
  }
  return scale > 0 ? worst / scale : worst;
}

// Per image: y, and with stride 1 dx.
std::vector<std::vector<float>> conv_and_input_gradient(const Tensor& x, const Tensor& k, int stride, int dilation,
                                                        Padding padding, const Tensor& b, const Tensor& dy) {
  GradientTape tape;
  tape.watch(x);
  const Tensor y = ops::conv2d(x, k, {stride, stride}, padding, {dilation, dilation}, b);
  if (stride != 1) return {y.to_vector()};
  return {y.to_vector(), tape.gradient(y, {x}, nullptr, dy)[0].to_vector()};
}

Tensor image_of(const Tensor& batch, int64_t i) {
  const int64_t n = batch.size() / batch.dim(0);
  Shape shape = batch.shape();
  shape[0] = 1;
  return Tensor::from_vector(shape, std::span<const float>(batch.data() + i * n, static_cast<size_t>(n)));
}

// oneDNN's y, dx and dkernel against the im2col backend, which conv_test.cc checks against direct loops (a direct
// loop this size takes most of a minute in the sanitized build). Sums of thousands of terms of
// either sign: relative to the largest value.
void expect_onednn_agrees_with_im2col(const Shape& xs, const Shape& ks, uint64_t seed, int stride = 1) {
  const std::array<int, 2> strides = {stride, stride};
  const Tensor x = random_host(xs, -1, 1, seed), k = random_host(ks, -1, 1, seed + 1);
  const Tensor dy = random_host(ops::conv2d_output_shape(xs, ks, strides, Padding::same, {1, 1}), -1, 1, seed + 2);
  std::vector<std::vector<float>> got[2];
  for (int b = 0; b < 2; ++b) {
    const testing::ConvBackendScope backend(testing::kConvBackends[b]);
    for (const Tensor& t : testing::conv_gradients(x, k, dy, strides, Padding::same, {1, 1})) got[b].push_back(t.to_vector());
    got[b].push_back(ops::conv2d(x, k, strides, Padding::same).to_vector());
  }
  const char* names[] = {"dx", "dkernel", "y"};
  for (size_t i = 0; i < 3; ++i) {
    float scale = 0, worst = 0;
    for (size_t j = 0; j < got[0][i].size(); ++j) {
      scale = std::max(scale, std::fabs(got[1][i][j]));
      worst = std::max(worst, std::fabs(got[0][i][j] - got[1][i][j]));
    }
    EXPECT_LE(worst, 1e-5f * scale) << shape_string(xs) << " " << names[i] << ": oneDNN and im2col differ by " << worst
                                    << " (largest value " << scale << ")";
  }
}

// A batch oneDNN cuts into tasks of images (the kernel gradient summed from their partials).
TEST(Conv2dTest, OneDnnInTwoTasksAgreesWithIm2col) {
  ASSERT_GT(ops::detail::kernel_gradient_tasks(testing::same_geometry({4, 16, 16, 128}, {3, 3, 128, 128})), 1);
  expect_onednn_agrees_with_im2col({4, 16, 16, 128}, {3, 3, 128, 128}, 400);
}

// Large kernels over a small batch: the kernel gradient in blocks of output channels, each over the
// whole batch (conv_tasks.h's kernel_gradient_channel_blocks), 3x3 and a strided 1x1 (a pointwise
// one's kernel gradient is one product, below).
TEST(Conv2dTest, OneDnnKernelGradientInChannelBlocksAgreesWithIm2col) {
  const std::tuple<Shape, Shape, int> cases[] = {{{2, 12, 12, 256}, {3, 3, 256, 256}, 1},
                                                 {{2, 32, 32, 256}, {1, 1, 256, 1024}, 2}};
  uint64_t seed = 410;
  for (const auto& [xs, ks, stride] : cases) {
    const ops::detail::ConvGeometry g = testing::same_geometry(xs, ks, stride);
    ASSERT_TRUE(ops::detail::onednn_runs(g) && ops::detail::onednn_runs_dk(g)) << shape_string(ks);
    ASSERT_GT(ops::detail::kernel_gradient_channel_blocks(g), 2) << shape_string(ks);
    expect_onednn_agrees_with_im2col(xs, ks, seed, stride);
    seed += 3;
  }
}

// A pointwise convolution's kernel gradient is one product xᵀ · dy (ops/gemm.h) on either backend,
// where oneDNN computes its y and dx (conv_onednn.h's onednn_runs_dk): the same bits as the im2col
// backend's, for a 1x1 64->256 over 512 pixels and ResNet50's deepest 2048->512 shape; strided 1x1
// and 3x3 kernels' gradients stay oneDNN's.
TEST(Conv2dTest, APointwiseKernelGradientIsOneProductOnEitherBackend) {
  const std::pair<Shape, Shape> cases[] = {{{2, 16, 16, 64}, {1, 1, 64, 256}}, {{8, 7, 7, 2048}, {1, 1, 2048, 512}}};
  uint64_t seed = 430;
  for (const auto& [xs, ks] : cases) {
    ASSERT_TRUE(ops::detail::onednn_runs(testing::same_geometry(xs, ks))) << shape_string(xs);
    EXPECT_FALSE(ops::detail::onednn_runs_dk(testing::same_geometry(xs, ks))) << shape_string(xs);
    const Tensor x = random_host(xs, -1, 1, seed), k = random_host(ks, -1, 1, seed + 1);
    const Tensor dy = random_host(ops::conv2d_output_shape(xs, ks, {1, 1}, Padding::same, {1, 1}), -1, 1, seed + 2);
    std::vector<float> dkernel[2];
    for (int b = 0; b < 2; ++b) {
      const testing::ConvBackendScope backend(testing::kConvBackends[b]);
      dkernel[b] = testing::conv_gradients(x, k, dy, {1, 1}, Padding::same, {1, 1})[1].to_vector();
    }
    EXPECT_EQ(dkernel[0], dkernel[1]) << shape_string(xs);
    seed += 3;
  }
  EXPECT_TRUE(ops::detail::onednn_runs_dk(testing::same_geometry({2, 32, 32, 64}, {1, 1, 64, 256}, 2)));
  EXPECT_TRUE(ops::detail::onednn_runs_dk(testing::same_geometry({2, 16, 16, 64}, {3, 3, 64, 64})));
}

// An image convolved alone, which oneDNN's float32 passes cut into bands of rows (onednn_row_bands:
// forward's output rows; with stride 1 the input gradient's input rows), gets the bits it gets as
// one of a batch of 16 (whole images): 3x3 and 1x1, "same" and "valid", the 7x7 stride-2 stem,
// stride 2, odd sizes, dilation, with and without a bias.
TEST(Conv2dTest, AnImageInBandsOfRowsGetsTheBitsOfTheWholeImage) {
  struct Case {
    Shape x, kernel;
    int stride, dilation;
    Padding padding;
    bool bias;
  };
  const std::vector<Case> cases = {{{16, 56, 56, 64}, {3, 3, 64, 64}, 1, 1, Padding::same, false},
                                   {{16, 56, 56, 64}, {1, 1, 64, 256}, 1, 1, Padding::valid, true},
                                   {{16, 30, 30, 128}, {3, 3, 128, 128}, 1, 1, Padding::valid, false},
                                   {{16, 40, 40, 64}, {3, 3, 64, 128}, 1, 2, Padding::same, true},
                                   {{16, 224, 224, 3}, {7, 7, 3, 64}, 2, 1, Padding::same, true},
                                   {{16, 56, 56, 128}, {3, 3, 128, 128}, 2, 1, Padding::same, true},
                                   {{16, 57, 57, 32}, {3, 3, 32, 256}, 2, 1, Padding::same, false}};
  const testing::ConvBackendScope scope(ops::ConvBackend::onednn);
  uint64_t seed = 500;
  for (const Case& c : cases) {
    ops::detail::ConvGeometry g;
    g.batch = 1, g.in_channels = c.x[3], g.out_channels = c.kernel[3];
    g.h = ops::window_axis("conv2d", c.x[1], c.kernel[0], c.stride, c.dilation, c.padding);
    g.w = ops::window_axis("conv2d", c.x[2], c.kernel[1], c.stride, c.dilation, c.padding);
    ASSERT_GT(ops::detail::onednn_row_bands(g, false), 1) << shape_string(c.x);
    if (c.stride == 1) ASSERT_GT(ops::detail::onednn_row_bands(g, true), 1) << shape_string(c.x);
    g.batch = c.x[0];
    ASSERT_EQ(ops::detail::onednn_row_bands(g, false), 1) << shape_string(c.x);
    ASSERT_EQ(ops::detail::onednn_row_bands(g, true), 1) << shape_string(c.x);
    const Tensor x = random_host(c.x, -1, 1, seed++), k = random_host(c.kernel, -1, 1, seed++);
    const Tensor b = c.bias ? random_host({c.kernel[3]}, -1, 1, seed++) : Tensor();
    const Tensor dy = random_host({c.x[0], g.h.output, g.w.output, c.kernel[3]}, -1, 1, seed++);
    const std::vector<std::vector<float>> batch = conv_and_input_gradient(x, k, c.stride, c.dilation, c.padding, b, dy);
    for (int64_t i : {int64_t{0}, c.x[0] - 1}) {
      const std::vector<std::vector<float>> alone =
          conv_and_input_gradient(image_of(x, i), k, c.stride, c.dilation, c.padding, b, image_of(dy, i));
      ASSERT_EQ(alone.size(), batch.size());
      for (size_t r = 0; r < alone.size(); ++r) {
        const int64_t n = static_cast<int64_t>(alone[r].size());
        ASSERT_EQ(n * c.x[0], static_cast<int64_t>(batch[r].size()));
        EXPECT_TRUE(std::equal(alone[r].begin(), alone[r].end(), batch[r].begin() + i * n))
            << shape_string(c.x) << " image " << i << (r == 0 ? " y" : " dx");
      }
    }
  }
}

// A bias given to conv2d goes into oneDNN's float32 forward kernel: the bits of conv2d then
// bias_add, forward and every gradient (x, kernel, bias), at sizes of one and of several tasks, and
// under im2col (where it is bias_add after the convolution) as well.
TEST(Conv2dTest, BiasInTheConvolutionGivesTheBitsOfBiasAddAfterIt) {
  struct Case {
    Shape x, kernel;
    std::array<int, 2> strides;
    Padding padding;
  };
  const std::vector<Case> cases = {{{2, 16, 16, 8}, {3, 3, 8, 16}, {1, 1}, Padding::same},
                                   {{4, 20, 20, 16}, {1, 1, 16, 32}, {2, 2}, Padding::valid},
                                   {{8, 32, 32, 3}, {7, 7, 3, 16}, {2, 2}, Padding::same}};
  uint64_t seed = 300;
  for (const ops::ConvBackend backend : testing::kConvBackends) {
    const testing::ConvBackendScope scope(backend);
    for (const Case& c : cases) {
      Tensor x = random_host(c.x, -1, 1, seed++), k = random_host(c.kernel, -1, 1, seed++);
      Tensor b = random_host({c.kernel[3]}, -1, 1, seed++);
      std::vector<std::vector<float>> got[2];
      for (int fused = 0; fused < 2; ++fused) {
        GradientTape tape;
        for (const Tensor* t : {&x, &k, &b}) tape.watch(*t);
        const Tensor y = fused ? ops::conv2d(x, k, c.strides, c.padding, {1, 1}, b)
                               : ops::bias_add(ops::conv2d(x, k, c.strides, c.padding, {1, 1}), b);
        const Tensor dy = random_host(y.shape(), -1, 1, 77);
        const Tensor loss = ops::reduce_sum(ops::matmul(ops::reshape(y, {1, y.size()}), ops::reshape(dy, {y.size(), 1})));
        got[fused].push_back(y.to_vector());
        for (const Tensor& g : tape.gradient(loss, {x, k, b})) got[fused].push_back(g.to_vector());
      }
      for (size_t i = 0; i < got[0].size(); ++i) {
        EXPECT_EQ(got[0][i], got[1][i]) << testing::conv_backend_name(backend) << " " << shape_string(c.x) << " value " << i;
      }
    }
  }
}

// Under bfloat16, where oneDNN runs (its bfloat16 kernels where this CPU has them): the output is the
// float32 convolution of the rounded operands, rounded — to within one bfloat16 step, oneDNN's
// bfloat16 kernels summing in their own order — and both gradients (float32) are the float32
// convolution's gradients on the rounded operands and the rounded dy, to within float32 sums in
// another order (1e-5 of the largest; without dy's rounding they differ by ~1e-3); so are im2col's
// under bfloat16. dy is not a bfloat16 number here, so the rounding is exercised.
TEST(Conv2dTest, Bfloat16OnOneDnnIsTheFloat32ConvolutionOfRoundedOperands) {
  const bool native = onednn_has_bfloat16();
  if (!native) std::printf("this CPU has no oneDNN bfloat16 convolutions: bfloat16 ones run on im2col\n");
  struct Config {
    Shape x, kernel;
    std::array<int, 2> strides;
    Padding padding;
    std::array<int, 2> dilation;
  };
  const Config configs[] = {{{4, 16, 16, 32}, {3, 3, 32, 48}, {1, 1}, Padding::same, {1, 1}},
                            {{2, 20, 20, 64}, {1, 1, 64, 32}, {1, 1}, Padding::valid, {1, 1}},
                            {{2, 33, 31, 16}, {3, 3, 16, 24}, {2, 2}, Padding::same, {1, 1}}};
  uint64_t seed = 600;
  for (const Config& c : configs) {
    SCOPED_TRACE(shape_string(c.x) + " * " + shape_string(c.kernel));
    const Tensor x = random_host(c.x, -1, 1, seed++).to(DType::bfloat16).to(DType::float32);
    const Tensor k = random_host(c.kernel, -1, 1, seed++).to(DType::bfloat16).to(DType::float32);
    const Tensor dy = random_host(ops::conv2d_output_shape(c.x, c.kernel, c.strides, c.padding, c.dilation), -1, 1, seed++);
    const Tensor dy_rounded = dy.to(DType::bfloat16).to(DType::float32);
    auto run = [&](DType dt, const Tensor& upstream) {
      GradientTape tape;
      tape.watch(x);
      tape.watch(k);
      Tensor y;
      {
        const ops::ComputeDTypeScope compute(dt);
        y = ops::conv2d(x, k, c.strides, c.padding, c.dilation);
      }
      EXPECT_EQ(y.dtype(), dt);
      const Tensor y32 = ops::cast(y, DType::float32);
      const Tensor target =
          ops::matmul(ops::reshape(y32, {1, y32.size()}), ops::reshape(upstream, {upstream.size(), 1}));
      std::vector<Tensor> got = tape.gradient(target, {x, k});
      got.push_back(y32);
      return got;
    };
    std::vector<std::vector<float>> bf16[2], f32[2], f32_unrounded_dy;
    for (int b = 0; b < 2; ++b) {
      const testing::ConvBackendScope backend(testing::kConvBackends[b]);
      for (const Tensor& t : run(DType::bfloat16, dy)) bf16[b].push_back(t.to_vector());
      for (const Tensor& t : run(DType::float32, dy_rounded)) f32[b].push_back(t.to_vector());
    }
    for (const Tensor& t : run(DType::float32, dy)) f32_unrounded_dy.push_back(t.to_vector());
    for (int b = 0; b < 2; ++b) {
      EXPECT_LE(relative_difference(bf16[b][0], f32[0][0]), 1e-5f) << "dx, backend " << b;
      EXPECT_LE(relative_difference(bf16[b][1], f32[0][1]), 1e-5f) << "dkernel, backend " << b;
    }
    EXPECT_GT(relative_difference(f32_unrounded_dy[0], f32[0][0]), 1e-4f) << "dy's rounding is not exercised";
    const std::vector<float> want =
        Tensor::from_vector({static_cast<int64_t>(f32[0][2].size())}, f32[0][2]).to(DType::bfloat16).to_vector();
    for (size_t i = 0; i < want.size(); ++i) {
      // One bfloat16 step (8 significant bits) of the larger magnitude, at least of 2^-20 near zero.
      const float step = std::max(std::ldexp(std::max(std::fabs(want[i]), std::fabs(bf16[0][2][i])), -7), 1e-6f);
      ASSERT_LE(std::fabs(bf16[0][2][i] - want[i]), step) << "y[" << i << "]: " << bf16[0][2][i] << " vs " << want[i];
    }
  }
}

// A float32 variable goes into oneDNN's bfloat16 kernels unrounded (the reorder into their layout
// rounds it): output and both gradients are bit for bit those of the variable rounded beforehand —
// dx of the 3-channel stem too, which im2col computes from the kernel's rounded values.
TEST(Conv2dTest, Bfloat16OnOneDnnRoundsAVariableAsRoundingItFirstWould) {
  if (!onednn_has_bfloat16()) GTEST_SKIP() << "this CPU has no oneDNN bfloat16 convolutions";
  const testing::ConvBackendScope backend(ops::ConvBackend::onednn);
  struct Config {
    Shape x, kernel;
    std::array<int, 2> strides;
    Padding padding;
  };
  const Config configs[] = {{{4, 16, 16, 32}, {3, 3, 32, 40}, {1, 1}, Padding::same},
                            {{2, 40, 40, 3}, {7, 7, 3, 16}, {2, 2}, Padding::valid}};
  uint64_t seed = 610;
  for (const Config& c : configs) {
    SCOPED_TRACE(shape_string(c.x) + " * " + shape_string(c.kernel));
    const Tensor x = random_host(c.x, -1, 1, seed++);
    const Tensor drawn = random_host(c.kernel, -1, 1, seed++);
    const Tensor dy = random_host(ops::conv2d_output_shape(c.x, c.kernel, c.strides, c.padding, {1, 1}), -1, 1, seed++);
    auto run = [&](const Tensor& kernel_values) {
      Tensor kernel = kernel_values.clone();
      kernel.mark_trainable_variable(true);
      GradientTape tape;
      tape.watch(x);
      tape.watch(kernel);
      Tensor y;
      {
        const ops::ComputeDTypeScope compute(DType::bfloat16);
        y = ops::conv2d(x, kernel, c.strides, c.padding);
      }
      const Tensor y32 = ops::cast(y, DType::float32);
      std::vector<Tensor> got =
          tape.gradient(ops::matmul(ops::reshape(y32, {1, y32.size()}), ops::reshape(dy, {dy.size(), 1})), {x, kernel});
      got.push_back(y32);
      return got;
    };
    const Tensor pre_rounded = drawn.to(DType::bfloat16).to(DType::float32);
    ASSERT_NE(drawn.to_vector(), pre_rounded.to_vector());
    const std::vector<Tensor> raw = run(drawn), pre = run(pre_rounded);
    const char* what[] = {"dx", "dkernel", "y"};
    for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(raw[i].to_vector() == pre[i].to_vector()) << what[i];
  }
}

}  // namespace
}  // namespace keel
