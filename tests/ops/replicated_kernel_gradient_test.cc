// A replicated pointwise convolution's kernel gradient (ops/replicated_kernel_gradient.h): over few
// rows, keel's chained products, the ones a Dense kernel's gradient takes, computed by the replica or
// left to the all-reduce; elsewhere oneDNN's product as before. Who computes it, and when, changes
// neither the numbers nor what each core is charged.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <span>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "framework/autodiff/tape.h"
#include "framework/core/random.h"
#include "framework/device/chained_product.h"
#include "framework/device/replica_context.h"
#include "framework/layers/conv_layers.h"
#include "framework/layers/core_layers.h"
#include "framework/layers/initializers.h"
#include "framework/model/functional.h"
#include "framework/ops/conv.h"
#include "framework/ops/ops.h"
#include "framework/train/losses.h"
#include "framework/train/optimizers.h"
#include "tests/support/training_cases.h"

namespace keel {
namespace {

// Ramps of period `period` around 0, `step` apart.
std::vector<float> pointwise_ramp(size_t n, int64_t period, float step) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = step * static_cast<float>(static_cast<int64_t>(i) % period - period / 2);
  return v;
}

struct PointwiseGradients {
  std::vector<float> conv_deferred, conv_whole, dense;  // replica 0's
  bool deferred = false;                                // the convolution's was left to the all-reduce
};

// On 2 replicas, the gradient of 0.37 · sum(y) (dy the same everywhere) for a kernel (k, k, cin,
// cout) of x (2, hw, hw, cin) ("same" padding: with k = 3 and hw = 1 a single-tap convolution):
// conv2d's, deferred then whole, and matmul's for x as (rows, cin).
PointwiseGradients pointwise_gradients(int64_t hw, int64_t cin, int64_t cout, int64_t k = 1) {
  ReplicatedStrategy strategy(DeviceSpec::custom(2, 0), ReplicatedStrategy::Options{.host_threads = 1});
  const std::vector<float> ks = pointwise_ramp(static_cast<size_t>(k * k * cin * cout), 977, 0.001f);
  std::unique_ptr<Variable> kernel, matrix;
  {
    auto scope = strategy.scope();
    kernel = std::make_unique<Variable>("k", Tensor::from_vector({k, k, cin, cout}, ks).clone(), true);
    matrix = std::make_unique<Variable>("w", Tensor::from_vector({cin, cout}, std::span(ks).first(static_cast<size_t>(cin * cout))).clone(), true);
  }
  const std::vector<float> xs = pointwise_ramp(static_cast<size_t>(2 * hw * hw * cin), 331, 0.01f);
  PointwiseGradients out;
  strategy.run_replicas([&](ReplicaContext& ctx) {
    const bool first = ctx.replica_id() == 0;
    for (bool defer : {true, false}) {
      ctx.allow_deferred_products(defer);
      const Tensor x = Tensor::from_vector({2, hw, hw, cin}, xs).clone();
      GradientTape tape;
      const Tensor y = ops::conv2d(x, kernel->value(), {1, 1}, ops::Padding::same);
      const std::vector<Tensor> g = tape.gradient(ops::reduce_sum(ops::scale(y, 0.37f)), std::vector<Variable*>{kernel.get()});
      if (defer) {
        const std::vector<const DeferredProduct*> products = ctx.deferred_products(g);
        if (first) out.deferred = products.size() == 1 && products[0] != nullptr;
        ctx.materialize(g[0]);
      }
      if (first) (defer ? out.conv_deferred : out.conv_whole) = g[0].to_vector();
      ctx.allow_deferred_products(false);
    }
    const Tensor x2 = Tensor::from_vector({2 * hw * hw, cin}, xs).clone();
    GradientTape tape;
    const Tensor y = ops::matmul(x2, matrix->value());
    const std::vector<Tensor> g = tape.gradient(ops::reduce_sum(ops::scale(y, 0.37f)), std::vector<Variable*>{matrix.get()});
    if (first) out.dense = g[0].to_vector();
  });
  return out;
}

bool pointwise_same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// 32 rows of 256 -> 512 channels: the chained products, deferred where the step allows, with the
// bits of a Dense kernel's gradient over the same rows.
TEST(ReplicatedPointwiseKernelGradient, FewRowsTakeTheChainedProductsADenseKernelTakes) {
  const PointwiseGradients g = pointwise_gradients(4, 256, 512);
  EXPECT_EQ(g.deferred, kChainedProductsVectorized);  // a build without their vector forms leaves them to oneDNN
  EXPECT_TRUE(pointwise_same_bits(g.conv_deferred, g.conv_whole));
  EXPECT_TRUE(pointwise_same_bits(g.conv_whole, g.dense));
}

// 200 rows (over the limit of 128), and 128 rows of a gradient smaller than the replicas' operands: oneDNN's
// product as before, never deferred, equal to the chained products to float32 rounding.
TEST(ReplicatedPointwiseKernelGradient, ManyRowsOrSmallKernelsStayOneDnns) {
  for (const auto& [hw, cin, cout] : {std::array<int64_t, 3>{10, 512, 1024}, std::array<int64_t, 3>{8, 64, 256}}) {
    const PointwiseGradients g = pointwise_gradients(hw, cin, cout);
    EXPECT_FALSE(g.deferred) << hw << "x" << hw << ", " << cin << " -> " << cout;
    EXPECT_TRUE(pointwise_same_bits(g.conv_deferred, g.conv_whole));
    ASSERT_EQ(g.conv_whole.size(), g.dense.size());
    for (size_t i = 0; i < g.dense.size(); ++i) {
      ASSERT_NEAR(g.conv_whole[i], g.dense[i], 1e-5f * (1.0f + std::abs(g.dense[i]))) << "element " << i;
    }
  }
}

// A 3x3 "same" convolution on 1x1 maps (2 rows of 256 -> 512 channels): its centre tap's slice is
// the chained products' (a Dense kernel's gradient over the same rows, bit for bit), the other
// eight taps' zeros, deferred or not.
TEST(ReplicatedPointwiseKernelGradient, ASingleTapsSliceIsTheChainedProductsTheOtherTapsZeros) {
  const int64_t cin = 256, cout = 512, slice = cin * cout;
  const PointwiseGradients g = pointwise_gradients(1, cin, cout, 3);
  EXPECT_EQ(g.deferred, kChainedProductsVectorized);
  EXPECT_TRUE(pointwise_same_bits(g.conv_deferred, g.conv_whole));
  ASSERT_EQ(g.conv_whole.size(), static_cast<size_t>(9 * slice));
  const std::vector<float> centre(g.conv_whole.begin() + 4 * slice, g.conv_whole.begin() + 5 * slice);
  if (kChainedProductsVectorized) EXPECT_TRUE(pointwise_same_bits(centre, g.dense));
  int64_t nonzero_elsewhere = 0, zero_in_centre = 0;
  for (int64_t i = 0; i < 9 * slice; ++i) {
    const bool in_centre = i >= 4 * slice && i < 5 * slice;
    const uint32_t bits = std::bit_cast<uint32_t>(g.conv_whole[static_cast<size_t>(i)]);
    if (!in_centre && bits != 0) ++nonzero_elsewhere;  // +0.0 exactly
    if (in_centre && bits == 0) ++zero_in_centre;
  }
  EXPECT_EQ(nonzero_elsewhere, 0);
  EXPECT_LT(zero_in_centre, slice / 10);
}

// Two convolution layers (64 -> 256 -> 64, k x k kernels) on hw x hw maps, global average pooling
// and a Dense layer, trained 6 steps on `custom:2` from seeds of their own, 2 images a replica.
struct ConvPair {
  int64_t hw;
  int kernel;
  std::string padding;
  uint64_t model_seed, batch_seed;
};

// Their kernel gradients deferred to the all-reduce or computed by each replica.
testing::TrainedState train_conv_pair(const ConvPair& pair, bool defer, int host_threads) {
  const testing::DeferredKernelGradients setting(defer);
  clear_session();
  set_random_seed(pair.model_seed);
  ReplicatedStrategy strategy(DeviceSpec::custom(2, 0), ReplicatedStrategy::Options{.host_threads = host_threads});
  std::unique_ptr<Model> model;
  {
    auto scope = strategy.scope();
    const std::array<int, 2> k{pair.kernel, pair.kernel};
    KerasTensor in = Input({pair.hw, pair.hw, 64});
    KerasTensor x = (*Conv2D(256, k, {.padding = pair.padding, .activation = "relu"}))(in);
    x = (*Conv2D(64, k, {.padding = pair.padding}))(x);
    x = (*GlobalAveragePooling2D())(x);
    x = (*Dense(10, "softmax"))(x);
    model = std::make_unique<Functional>(in, x);
    model->compile(std::make_shared<Adam>(), std::make_shared<CategoricalCrossentropy>());
  }
  const testing::Case c{"", {pair.hw, pair.hw, 64}, DeviceSpec::custom(2, 0), 2};
  for (int s = 0; s < 6; ++s) model->train_step(testing::random_batch(c, pair.batch_seed + static_cast<uint64_t>(s)));
  return testing::trained_state(*model, strategy.ledger());
}

// The same weights, Adam slots and charges per core deferred or not, on 1 and 2 host threads.
void expect_trained_alike_deferred_or_not(const ConvPair& pair) {
  const testing::TrainedState reference = train_conv_pair(pair, false, 1);
  for (int threads : {1, 2}) {
    for (bool defer : {false, true}) {
      testing::expect_same_trained_state(reference, train_conv_pair(pair, defer, threads),
                                         std::to_string(threads) + " thread(s), " + (defer ? "deferred" : "whole"));
    }
  }
}

// Pointwise layers on 4x4 maps (32 rows a replica).
TEST(ReplicatedPointwiseKernelGradient, TrainingEndsBitIdenticalAndChargedAlikeDeferredOrNot) {
  expect_trained_alike_deferred_or_not({4, 1, "valid", 7, 900});
}

// Single-tap layers (3x3 "same" on 1x1 maps): the all-reduce writes the zeros of the other taps and
// the chained products of the centre one with the bits each replica's whole gradient and their tree
// sum give.
TEST(ReplicatedPointwiseKernelGradient, SingleTapTrainingEndsBitIdenticalAndChargedAlikeDeferredOrNot) {
  expect_trained_alike_deferred_or_not({1, 3, "same", 11, 300});
}

}  // namespace
}  // namespace keel
