// What the replicas of a process derive from a kernel variable and share (framework/ops/shared_kernels.h):
// oneDNN's reorders of it and its bfloat16 rounding, made once per step between them. Sharing changes
// where bytes come from, never the numbers: every test compares sharing on and off bit for bit, and
// checks that sharing happened.
#include "framework/ops/shared_kernels.h"

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/autodiff/tape.h"
#include "framework/autodiff/variable.h"
#include "framework/device/context.h"
#include "framework/device/strategy.h"
#include "framework/layers/dtype_policy.h"
#include "framework/layers/initializers.h"
#include "framework/layers/layer.h"
#include "framework/ops/conv.h"
#include "framework/ops/ops.h"
#include "framework/ops/precision.h"
#include "tests/support/conv_backend.h"
#include "tests/support/grad_check.h"
#include "tests/support/training_cases.h"

namespace keel {
namespace {

using ops::Padding;
using testing::random_host;

// Every variable (then every Adam slot) after `steps` steps of `c` on random batches in `precision`.
std::vector<std::vector<float>> trained_weights(const testing::Case& c, const char* precision, int steps) {
  clear_session();
  set_random_seed(11);
  ReplicatedStrategy strategy(c.device);
  std::unique_ptr<Model> model;
  {
    auto scope = strategy.scope();
    const mixed_precision::GlobalPolicyScope policy{mixed_precision::Policy(precision)};
    model = testing::build_compiled(c);
    model->optimizer().build(model->trainable_variables());
  }
  for (int s = 0; s < steps; ++s) model->train_step(testing::random_batch(c, 100 + static_cast<uint64_t>(s)));
  std::vector<std::vector<float>> weights;
  for (Variable* v : model->variables()) weights.push_back(v->value().to_vector());
  for (Variable* v : model->optimizer().slot_variables()) weights.push_back(v->value().to_vector());
  return weights;
}

// The replicas of a step share a variable's reorder into oneDNN's layouts and, in mixed precision,
// its bfloat16 rounding for the im2col convolutions (shared_kernels.h): ResNet18 at 56x56 on 2 cores
// (its stem and first stage on oneDNN, the other stages on im2col) ends 4 steps with the same bits
// as with sharing off, in float32 and in mixed precision; and sharing happened: buffers read by
// replicas that did not make them, and made anew on every step, after every update.
TEST(Conv2dTest, ReplicasSharingAVariablesReorderedKernelGiveTheSameBits) {
  const testing::ConvBackendScope backend(ops::ConvBackend::onednn);
  const testing::Case c{"resnet18", {56, 56, 1}, DeviceSpec::custom(2, 0), 2};
  constexpr int kSteps = 4;
  for (const char* precision : {"float32", "mixed_bfloat16"}) {
    SCOPED_TRACE(precision);
    const ops::detail::KernelSharingCounts before = ops::detail::kernel_sharing_counts();
    const std::vector<std::vector<float>> shared = trained_weights(c, precision, kSteps);
    const ops::detail::KernelSharingCounts after = ops::detail::kernel_sharing_counts();
    std::vector<std::vector<float>> alone;
    {
      struct SharingOff {
        SharingOff() { ops::detail::set_kernel_sharing(false); }
        ~SharingOff() { ops::detail::set_kernel_sharing(true); }
      } off;
      alone = trained_weights(c, precision, kSteps);
    }
    EXPECT_EQ(ops::detail::kernel_sharing_counts().filled, after.filled);
    // Forward's and dx's layouts of the first stage's four 3x3 kernels and the stem's, each step.
    EXPECT_GE(after.filled - before.filled, kSteps * 9);
    EXPECT_GT(after.reused - before.reused, 0);
    // The roundings of the last three stages' 15 kernels (forward and backward share one), each step.
    if (std::string(precision) == "float32") {
      EXPECT_EQ(after.rounded, before.rounded);
    } else {
      EXPECT_GE(after.rounded - before.rounded, kSteps * 15);
    }
    ASSERT_EQ(shared.size(), alone.size());
    for (size_t i = 0; i < shared.size(); ++i) EXPECT_TRUE(shared[i] == alone[i]) << "weight or slot " << i;
  }
}

// A float32 variable as a bfloat16 convolution's input stays float32, so the float32 passes run
// (on oneDNN at 256 output pixels or more, dx too from 16 channels), reading the kernel variable's
// bfloat16 rounding that the replicas share: on 2 replicas, output and both gradients are the same
// bits with sharing on and off, and the rounding was shared.
TEST(Conv2dTest, OneDnnsFloat32PassesReadASharedRounding) {
  const testing::ConvBackendScope backend(ops::ConvBackend::onednn);
  ReplicatedStrategy strategy(DeviceSpec::custom(2, 0));
  std::unique_ptr<Variable> x, kernel;
  {
    auto scope = strategy.scope();
    Tensor xv = Tensor::empty({2, 16, 16, 16}), kv = Tensor::empty({3, 3, 16, 16});
    xv.copy_from(random_host(xv.shape(), -1, 1, 41));
    kv.copy_from(random_host(kv.shape(), -1, 1, 42));
    x = std::make_unique<Variable>("x", xv, true);
    kernel = std::make_unique<Variable>("kernel", kv, true);
  }
  const auto step = [&] {
    return strategy.run(
        [&](const Batch&) {
          const ops::ComputeDTypeScope bf16(DType::bfloat16);
          GradientTape tape;
          const Tensor y = ops::conv2d(x->value(), kernel->value(), {1, 1}, Padding::same);
          const std::vector<Tensor> g = tape.gradient(ops::reduce_sum(ops::cast(y, DType::float32)), {x->value(), kernel->value()});
          return std::vector<std::vector<float>>{y.to(DType::float32).to_vector(), g[0].to_vector(), g[1].to_vector()};
        },
        std::vector<Batch>(2));
  };
  const int64_t rounded_before = ops::detail::kernel_sharing_counts().rounded;
  const auto shared = step();
  EXPECT_GT(ops::detail::kernel_sharing_counts().rounded, rounded_before);
  ops::detail::set_kernel_sharing(false);
  const auto alone = step();
  ops::detail::set_kernel_sharing(true);
  ASSERT_EQ(shared.size(), 2u);
  for (size_t r = 0; r < shared.size(); ++r) {
    for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(shared[r][i] == alone[r][i]) << "replica " << r << ", output/dx/dkernel " << i;
  }
}

}  // namespace
}  // namespace keel
