// GradientPlacement: where a replica's backward writes its variables' gradients (under mpirun, the
// memory the other processes sum them from). Only where the bytes live changes: the gradients of
// matmul, bias_add, conv2d (kernel and bias) and batch_norm_training (gamma and beta) land in the
// placement's memory with the bits they have elsewhere; a second gradient of one variable, a size
// that differs, or a variable not listed go to memory of their own.
#include "framework/device/gradient_placement.h"

#include <cstring>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "framework/autodiff/tape.h"
#include "framework/ops/batch_norm.h"
#include "framework/ops/conv.h"
#include "framework/ops/ops.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using testing::random_host;

Tensor variable(const Shape& shape, uint64_t seed) {
  Tensor t = random_host(shape, -1, 1, seed);
  t.mark_trainable_variable(true);
  return t;
}

// Placement of each of `vars` at consecutive offsets of `arena` (which it sizes).
std::shared_ptr<GradientPlacement> place(const std::vector<Tensor>& vars, std::vector<float>& arena) {
  int64_t total = 0;
  for (const Tensor& v : vars) total += v.size();
  arena.assign(static_cast<size_t>(total), -7.0f);
  auto placement = std::make_shared<GradientPlacement>();
  int64_t at = 0;
  for (const Tensor& v : vars) {
    placement->slots[v.storage().id()] = {arena.data() + at, v.size()};
    at += v.size();
  }
  return placement;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), static_cast<size_t>(a.bytes())) == 0;
}

TEST(GradientPlacementTest, ASlotIsTakenOnceAndOnlyInsideItsScope) {
  float memory[6] = {};
  auto placement = std::make_shared<GradientPlacement>();
  placement->slots[42] = {memory, 6};
  EXPECT_EQ(placed_gradient(42, 6), nullptr);  // no scope
  {
    const GradientPlacementScope scope(placement);
    EXPECT_EQ(placed_gradient(42, 5), nullptr);  // another size
    EXPECT_EQ(placed_gradient(7, 6), nullptr);   // another variable
    EXPECT_EQ(placed_gradient(0, 6), nullptr);   // not a variable
    EXPECT_EQ(placed_gradient(42, 6), memory);
    EXPECT_EQ(placed_gradient(42, 6), nullptr);  // taken
    {
      const GradientPlacementScope none(nullptr);
      EXPECT_EQ(current_gradient_placement(), nullptr);
    }
    EXPECT_NE(current_gradient_placement(), nullptr);
  }
  EXPECT_EQ(current_gradient_placement(), nullptr);
  const GradientPlacementScope again(placement);  // each scope its own copy: the slot is free again
  EXPECT_EQ(placed_gradient(42, 6), memory);
}

TEST(GradientPlacementTest, DenseGradientsLandInThePlacementWithTheSameBits) {
  const Tensor x = random_host({5, 3}, -1, 1, 1);
  const Tensor w = variable({3, 4}, 2), b = variable({4}, 3);
  const auto gradients = [&] {
    GradientTape tape;
    return tape.gradient(ops::reduce_sum(ops::relu(ops::bias_add(ops::matmul(x, w), b))), {w, b});
  };
  const std::vector<Tensor> plain = gradients();
  std::vector<float> arena;
  const GradientPlacementScope scope(place({w, b}, arena));
  const std::vector<Tensor> placed = gradients();
  EXPECT_EQ(placed[0].data(), arena.data());
  EXPECT_EQ(placed[1].data(), arena.data() + w.size());
  EXPECT_TRUE(same_bits(placed[0], plain[0]));
  EXPECT_TRUE(same_bits(placed[1], plain[1]));
}

TEST(GradientPlacementTest, ConvolutionAndBatchNormGradientsLandInThePlacementWithTheSameBits) {
  const Tensor x = random_host({2, 5, 5, 2}, -1, 1, 4);
  const Tensor kernel = variable({3, 3, 2, 3}, 5), bias = variable({3}, 6);
  const Tensor gamma = variable({3}, 7), beta = variable({3}, 8);
  const auto gradients = [&] {
    GradientTape tape;
    const Tensor y = ops::conv2d(x, kernel, {1, 1}, ops::Padding::same, {1, 1}, bias);
    return tape.gradient(ops::reduce_sum(ops::batch_norm_training(y, gamma, beta, 1e-3f, /*relu=*/true).y),
                         {kernel, bias, gamma, beta});
  };
  const std::vector<Tensor> plain = gradients();
  std::vector<float> arena;
  const GradientPlacementScope scope(place({kernel, bias, gamma, beta}, arena));
  const std::vector<Tensor> placed = gradients();
  int64_t at = 0;
  for (size_t i = 0; i < placed.size(); ++i) {
    EXPECT_EQ(placed[i].data(), arena.data() + at) << i;
    EXPECT_TRUE(same_bits(placed[i], plain[i])) << i;
    at += placed[i].size();
  }
}

// A variable used twice: the first gradient may be placed, the second is not (it would overwrite the
// first before the tape adds them), and the sum the tape returns is the unplaced run's.
TEST(GradientPlacementTest, AVariableUsedTwiceGetsOneSlotAndTheSameSum) {
  const Tensor x1 = random_host({4, 3}, -1, 1, 9), x2 = random_host({4, 3}, -1, 1, 10);
  const Tensor w = variable({3, 2}, 11);
  const auto gradient = [&] {
    GradientTape tape;
    return tape.gradient(ops::reduce_sum(ops::add(ops::matmul(x1, w), ops::matmul(x2, w))), {w})[0];
  };
  const Tensor plain = gradient();
  std::vector<float> arena;
  const GradientPlacementScope scope(place({w}, arena));
  const Tensor placed = gradient();
  EXPECT_TRUE(same_bits(placed, plain));
}

}  // namespace
}  // namespace keel
