// Mixed precision in ops (framework/ops/precision.h): under ComputeDTypeScope(bfloat16) every op
// equals its float32 form on bfloat16-rounded operands, rounded to bfloat16 (bit for bit), keeps
// bfloat16 for backward, and agrees with PyTorch's torch.bfloat16 kernels
// (tests/golden/bfloat16_small.json, from bench/golden_bfloat16.py).
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/autodiff/tape.h"
#include "framework/device/context.h"
#include "framework/device/ledger.h"
#include "framework/ops/batch_norm.h"
#include "framework/ops/concat.h"
#include "framework/ops/conv.h"
#include "framework/ops/ops.h"
#include "framework/ops/pooling.h"
#include "framework/ops/precision.h"
#include "tests/support/golden.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using testing::random_host;

Tensor rounded(const Tensor& x) { return x.to(DType::bfloat16).to(DType::float32); }

std::vector<uint32_t> bits(const Tensor& t) {
  const std::vector<float> v = t.to_vector();
  std::vector<uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
  return out;
}

// f under bfloat16 equals f in float32 on rounded inputs, rounded; and so do the gradients (float32)
// of sum(y * w) for a fixed w — which a convolution's products read rounded to bfloat16 too
// (round_dy: the reference gets the rounded w).
void expect_bfloat16_semantics(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& inputs,
                               const std::string& what, bool round_inputs = true, bool round_dy = false) {
  std::vector<Tensor> ref_inputs;
  for (const Tensor& x : inputs) ref_inputs.push_back(round_inputs ? rounded(x) : x);
  Tensor y, y_ref;
  std::vector<Tensor> g, g_ref;
  {
    GradientTape tape;
    for (const Tensor& x : inputs) tape.watch(x);
    {
      ops::ComputeDTypeScope bf16(DType::bfloat16);
      y = f(inputs);
    }
    const Tensor w = random_host(y.shape(), -1.0f, 1.0f, 7);
    g = tape.gradient(ops::reduce_sum(ops::matmul(ops::reshape(ops::cast(y, DType::float32), {1, y.size()}),
                                                  w.reshape({y.size(), 1}))),
                      inputs);
  }
  {
    GradientTape tape;
    for (const Tensor& x : ref_inputs) tape.watch(x);
    y_ref = f(ref_inputs);
    const Tensor w_drawn = random_host(y_ref.shape(), -1.0f, 1.0f, 7);
    const Tensor w = round_dy ? rounded(w_drawn) : w_drawn;
    g_ref = tape.gradient(ops::reduce_sum(ops::matmul(ops::reshape(y_ref, {1, y_ref.size()}), w.reshape({y_ref.size(), 1}))),
                          ref_inputs);
  }
  EXPECT_EQ(y.dtype(), DType::bfloat16) << what;
  EXPECT_EQ(bits(y), bits(rounded(y_ref))) << what << ": output";
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_TRUE(g[i].defined()) << what << " input " << i;
    EXPECT_EQ(g[i].dtype(), DType::float32) << what;
    EXPECT_EQ(bits(g[i]), bits(g_ref[i])) << what << ": gradient of input " << i;
  }
}

TEST(PrecisionTest, EveryOpIsItsFloat32FormOnRoundedOperandsRounded) {
  const Tensor a = random_host({6, 9}, -2, 2, 1), b = random_host({9, 5}, -2, 2, 2);
  expect_bfloat16_semantics([](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1]); }, {a, b}, "matmul");
  const Tensor x = random_host({2, 5, 5, 3}, -1, 1, 3), k = random_host({3, 3, 3, 4}, -1, 1, 4);
  expect_bfloat16_semantics(
      [](const std::vector<Tensor>& in) { return ops::conv2d(in[0], in[1], {1, 1}, ops::Padding::same); }, {x, k}, "conv2d", true, /*round_dy=*/true);
  // A single-tap convolution (1x1 maps under a 3x3 "same" kernel: one GEMM on the tap's slice).
  expect_bfloat16_semantics(
      [](const std::vector<Tensor>& in) { return ops::conv2d(in[0], in[1], {1, 1}, ops::Padding::same); },
      {random_host({6, 1, 1, 512}, -1, 1, 11), random_host({3, 3, 512, 64}, -1, 1, 12)}, "single-tap conv2d", true,
      /*round_dy=*/true);
  const Tensor k1 = random_host({1, 1, 3, 4}, -1, 1, 5);
  expect_bfloat16_semantics(
      [](const std::vector<Tensor>& in) { return ops::conv2d(in[0], in[1], {1, 1}, ops::Padding::valid); }, {x, k1},
      "pointwise conv2d", true, /*round_dy=*/true);
  const Tensor bias = random_host({5}, -1, 1, 6), m = random_host({4, 5}, -3, 3, 7);
  expect_bfloat16_semantics([](const std::vector<Tensor>& in) { return ops::bias_add(in[0], in[1]); }, {m, bias}, "bias_add");
  // bfloat16 activations (a mixed model's) take the ops' bfloat16-to-bfloat16 paths.
  const Tensor m16 = m.to(DType::bfloat16);
  expect_bfloat16_semantics([](const std::vector<Tensor>& in) { return ops::bias_add(in[0], in[1]); }, {m16, bias},
                            "bias_add of bfloat16 x");
  expect_bfloat16_semantics([](const std::vector<Tensor>& in) { return ops::add(in[0], in[1]); },
                            {m16, random_host({4, 5}, -3, 3, 8).to(DType::bfloat16)}, "add of bfloat16 operands");
  const Tensor x16 = random_host({2, 7, 7, 3}, -1, 1, 9).to(DType::bfloat16);
  expect_bfloat16_semantics(
      [](const std::vector<Tensor>& in) { return ops::max_pool2d(in[0], {3, 3}, {2, 2}, ops::Padding::same); }, {x16},
      "max_pool2d of bfloat16 x");
  expect_bfloat16_semantics([](const std::vector<Tensor>& in) { return ops::add(in[0], in[1]); }, {m, rounded(m)}, "add");
  expect_bfloat16_semantics([](const std::vector<Tensor>& in) { return ops::relu(in[0]); }, {m}, "relu");
  expect_bfloat16_semantics([](const std::vector<Tensor>& in) { return ops::scale(in[0], 0.3f); }, {m}, "scale");
  expect_bfloat16_semantics(
      [](const std::vector<Tensor>& in) { return ops::max_pool2d(in[0], {2, 2}, {2, 2}, ops::Padding::same); }, {x}, "max_pool2d");
  expect_bfloat16_semantics(
      [](const std::vector<Tensor>& in) { return ops::avg_pool2d(in[0], {3, 3}, {2, 2}, ops::Padding::same); }, {x}, "avg_pool2d");
  expect_bfloat16_semantics([](const std::vector<Tensor>& in) { return ops::global_avg_pool2d(in[0]); }, {x}, "global_avg_pool2d");
  expect_bfloat16_semantics([](const std::vector<Tensor>& in) { return ops::zero_pad2d(in[0], {1, 0, 2, 1}); }, {x}, "zero_pad2d");
  expect_bfloat16_semantics([](const std::vector<Tensor>& in) { return ops::concat({in[0], in[1]}, -1); }, {x, random_host({2, 5, 5, 2}, -1, 1, 10)}, "concat");
  // Batch norm computes in float32 on its input as it comes (bfloat16 in a mixed model): gamma and
  // beta are not rounded.
  const Tensor gamma = random_host({3}, 0.5, 1.5, 8), beta = random_host({3}, -1, 1, 9), xb = rounded(x);
  expect_bfloat16_semantics(
      [](const std::vector<Tensor>& in) { return ops::batch_norm_training(in[0], in[1], in[2], 1e-3f).y; }, {xb, gamma, beta},
      "batch_norm_training", /*round_inputs=*/false);
}

// Dropout's mask scale 1/(1 - rate) is itself a bfloat16 number under bfloat16.
TEST(PrecisionTest, DropoutScalesByABfloat16Number) {
  const Tensor x = random_host({50, 40}, -2, 2, 12);
  const float scale = round_to_bfloat16(1.0f / 0.7f);
  ASSERT_NE(scale, 1.0f / 0.7f);
  GradientTape tape;
  tape.watch(x);
  Tensor y;
  {
    ops::ComputeDTypeScope bf16(DType::bfloat16);
    y = ops::dropout(x, 0.3f, 99);
  }
  const Tensor g = tape.gradient(ops::reduce_sum(ops::cast(y, DType::float32)), std::vector<Tensor>{x})[0];
  const std::vector<float> xv = x.to_vector(), yv = y.to_vector(), gv = g.to_vector();
  int dropped = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    if (gv[i] == 0.0f) {
      ++dropped;
      EXPECT_EQ(yv[i], 0.0f) << i;
    } else {
      EXPECT_EQ(gv[i], scale) << i;
      EXPECT_EQ(yv[i], round_to_bfloat16(round_to_bfloat16(xv[i]) * scale)) << i;
    }
  }
  EXPECT_NEAR(dropped, 600, 120);
}

TEST(PrecisionTest, SoftmaxAndLossesStayFloat32AndCastPassesGradientsThrough) {
  const Tensor logits = random_host({4, 6}, -3, 3, 11);
  Tensor y;
  {
    ops::ComputeDTypeScope bf16(DType::bfloat16);
    y = ops::softmax(logits.to(DType::bfloat16));
  }
  EXPECT_EQ(y.dtype(), DType::float32);
  EXPECT_EQ(bits(y), bits(ops::softmax(rounded(logits))));
  const Tensor labels = Tensor::from_vector({4}, std::vector<float>{0, 5, 2, 3});
  EXPECT_EQ(bits(ops::sparse_softmax_cross_entropy_with_logits(labels, logits.to(DType::bfloat16))),
            bits(ops::sparse_softmax_cross_entropy_with_logits(labels, rounded(logits))));
  GradientTape tape;
  tape.watch(logits);
  const Tensor c = ops::cast(logits, DType::bfloat16);
  EXPECT_EQ(c.dtype(), DType::bfloat16);
  const Tensor g = tape.gradient(ops::reduce_sum(ops::cast(c, DType::float32)), std::vector<Tensor>{logits})[0];
  EXPECT_EQ(g.to_vector(), std::vector<float>(24, 1.0f));
}

TEST(PrecisionTest, WhatBackwardKeepsIsBfloat16AndPlannedAlike) {
  // A Dense-like chain on one core: matmul -> bias_add -> relu. Under bfloat16 the activations kept
  // for backward are the matmul's input (its bfloat16 copy) and the relu's output: 2 bytes each.
  auto kept_bytes = [](DType dt, bool abstract) {
    Ledger ledger(DeviceSpec::custom(1, 0));
    DeviceContext ctx;
    ctx.ledger = &ledger;
    ctx.core = 0;
    ctx.category = Category::activations;
    ctx.abstract = abstract;
    ContextScope scope(ctx);
    Tensor x = Tensor::empty({32, 64});
    Tensor w = Tensor::empty({64, 16}, Category::parameters, "w");
    Tensor b = Tensor::empty({16}, Category::parameters, "b");
    if (!abstract) {
      x.fill(0.5f);
      w.fill(0.25f);
      b.fill(0.1f);
    }
    w.mark_trainable_variable(true);
    b.mark_trainable_variable(true);
    GradientTape tape;
    const int64_t before = ledger.core(0).stat(Category::activations).current;
    Tensor y;
    {
      ops::ComputeDTypeScope compute(dt);
      y = ops::relu(ops::bias_add(ops::matmul(x, w), b));
    }
    const int64_t kept = ledger.core(0).stat(Category::activations).current - before - y.bytes();
    return std::pair<int64_t, int64_t>{kept, ledger.core(0).stat(Category::workspace).peak};
  };
  const auto [f32_kept, f32_workspace] = kept_bytes(DType::float32, false);
  const auto [bf16_kept, bf16_workspace] = kept_bytes(DType::bfloat16, false);
  EXPECT_EQ(f32_kept, 0) << "float32 keeps x itself (already counted) and relu's output (y)";
  EXPECT_EQ(bf16_kept, 32 * 64 * 2) << "bfloat16 keeps x's bfloat16 copy; the output is y";
  EXPECT_EQ(f32_workspace, 0);
  EXPECT_GT(bf16_workspace, 0) << "the float32 temporaries are workspace";
  EXPECT_EQ(kept_bytes(DType::bfloat16, true), kept_bytes(DType::bfloat16, false)) << "the plan charges what the run does";
}

// --- PyTorch golden values ---

using nlohmann::json;
using testing::expect_matches_golden;
using testing::tensor_of;

const json& precision_golden() { return testing::load_golden("bfloat16_small.json"); }

// keel's output within one bfloat16 step of torch's (accumulation order may flip a rounding); its
// float32 gradients within bfloat16's precision of torch's bfloat16 ones.
void expect_case(const json& c, const Tensor& y, const std::vector<Tensor>& grads, const std::vector<std::string>& names) {
  const std::string name = c.at("name").get<std::string>();
  EXPECT_EQ(y.dtype(), DType::bfloat16) << name;
  expect_matches_golden(y, c.at("y"), name + " y", 1.0 / 128);
  for (size_t i = 0; i < names.size(); ++i) expect_matches_golden(grads[i], c.at("d" + names[i]), name + " d" + names[i], 3e-2);
}

// y and the gradients of sum(y * dy) with respect to `inputs`, computing in bfloat16.
std::pair<Tensor, std::vector<Tensor>> run_case(const json& c, const std::vector<Tensor>& inputs,
                                                const std::function<Tensor(const std::vector<Tensor>&)>& f) {
  GradientTape tape;
  for (const Tensor& x : inputs) tape.watch(x);
  Tensor y;
  {
    ops::ComputeDTypeScope bf16(DType::bfloat16);
    y = f(inputs);
  }
  const Tensor dy = tensor_of(c.at("dy"));
  const Tensor loss = ops::reduce_sum(ops::matmul(ops::reshape(ops::cast(y, DType::float32), {1, y.size()}),
                                                  dy.reshape({dy.size(), 1})));
  return {y, tape.gradient(loss, inputs)};
}

TEST(PrecisionGoldenTest, MatmulConvAndBatchNormMatchTorchBfloat16) {
  const json& cases = precision_golden().at("cases");
  {
    const json& c = cases.at("matmul");
    const auto [y, g] = run_case(c, {tensor_of(c.at("a")), tensor_of(c.at("b"))},
                                 [](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1]); });
    expect_case(c, y, g, {"a", "b"});
  }
  for (const char* name : {"conv_same", "conv_valid_stride2"}) {
    const json& c = cases.at(name);
    const int s = c.at("stride").get<int>();
    const ops::Padding padding = c.at("padding") == "same" ? ops::Padding::same : ops::Padding::valid;
    const auto [y, g] = run_case(c, {tensor_of(c.at("x")), tensor_of(c.at("kernel"))},
                                 [s, padding](const std::vector<Tensor>& in) { return ops::conv2d(in[0], in[1], {s, s}, padding); });
    expect_case(c, y, g, {"x", "kernel"});
  }
  {
    const json& c = cases.at("batch_norm");
    const float eps = precision_golden().at("epsilon").get<float>();
    // The input arrives as bfloat16, as a convolution's output would.
    const auto [y, g] = run_case(c, {tensor_of(c.at("x")), tensor_of(c.at("gamma")), tensor_of(c.at("beta"))},
                                 [eps](const std::vector<Tensor>& in) {
                                   return ops::batch_norm_training(ops::cast(in[0], DType::bfloat16), in[1], in[2], eps).y;
                                 });
    expect_case(c, y, g, {"x", "gamma", "beta"});
  }
}

TEST(PrecisionGoldenTest, AResNetBlockMatchesTorchBfloat16) {
  const json& c = precision_golden().at("cases").at("resnet_block");
  const std::vector<std::string> names = {"x", "kernel1", "gamma1", "beta1", "kernel2", "gamma2", "beta2"};
  std::vector<Tensor> inputs;
  for (const std::string& n : names) inputs.push_back(tensor_of(c.at(n)));
  const float eps = precision_golden().at("epsilon").get<float>();
  const auto [y, g] = run_case(c, inputs, [eps](const std::vector<Tensor>& in) {
    const Tensor x = ops::cast(in[0], DType::bfloat16);
    Tensor h = ops::conv2d(x, in[1], {1, 1}, ops::Padding::same);
    h = ops::relu(ops::batch_norm_training(h, in[2], in[3], eps).y);
    h = ops::batch_norm_training(ops::conv2d(h, in[4], {1, 1}, ops::Padding::same), in[5], in[6], eps).y;
    return ops::relu(ops::add(h, x));
  });
  expect_case(c, y, g, names);
}

}  // namespace
}  // namespace keel
