// Adam's update skips the blocks it would leave as they are (zero gradients where m and v are +0):
// every element of the variable and of both slots must still get the bits of Keras's formula
// computed element by element, signs of zero included.
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/train/optimizers.h"
#include "tests/support/adam_reference.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using testing::host;

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
        << what << ", element " << i << ": " << got[i] << " against " << want[i];
  }
}

// Element i's gradient at step t: blocks of 16 that are always ±0 (the taps a 3x3 convolution on
// 1x1 maps never uses), blocks that are zero only from step 3 on (m and v no longer zero: Adam must
// still decay them), blocks with one non-zero element, and a ragged end.
float gradient(int64_t i, int t) {
  const int64_t block = i / 16;
  switch (block % 4) {
    case 0: return (i % 3 == 0) ? -0.0f : 0.0f;
    case 1: return t >= 3 ? 0.0f : std::cos(0.11f * static_cast<float>(i * t)) * 1e-2f;
    case 2: return i % 16 == 7 ? 0.5f / static_cast<float>(t) : 0.0f;
    default: return std::sin(0.07f * static_cast<float>(i + t)) * 1e-3f;
  }
}

TEST(AdamTest, BlocksOfZeroGradientsGetTheElementwiseFormulasBits) {
  const int64_t n = 16 * 41 + 9;
  std::vector<float> w0(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) w0[static_cast<size_t>(i)] = i % 5 == 0 ? -0.0f : std::sin(0.37f * static_cast<float>(i));
  Adam adam(Adam::Options{.learning_rate = 0.003f});
  Variable w("w", host({n}, w0), true);
  const std::vector<float> zeros(static_cast<size_t>(n), 0.0f);
  testing::AdamReference ref{w0, zeros, zeros};
  for (int t = 1; t <= 4; ++t) {
    std::vector<float> g(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) g[static_cast<size_t>(i)] = gradient(i, t);
    adam.apply_gradients({host({n}, g)}, {&w});
    testing::adam_reference_step(ref, g, 0.003f, t);
    const std::vector<Variable*> slots = adam.slot_variables();
    ASSERT_EQ(slots.size(), 2u);
    expect_same_bits(w.value().to_vector(), ref.w, "w after step " + std::to_string(t));
    expect_same_bits(slots[0]->value().to_vector(), ref.m, "m after step " + std::to_string(t));
    expect_same_bits(slots[1]->value().to_vector(), ref.v, "v after step " + std::to_string(t));
  }
}

// Slots as a checkpoint may restore them: m +0 where v is not, v +0 where m is not, m -0. Each such
// block's zero gradient still moves its slots (and -0 becomes +0): none may be skipped.
TEST(AdamTest, ZeroGradientsStillUpdateSlotsThatAreNotBothPositiveZero) {
  const int64_t n = 16 * 4;
  Adam adam(Adam::Options{.learning_rate = 0.01f});
  Variable w("w", host({n}, std::vector<float>(static_cast<size_t>(n), 0.25f)), true);
  adam.build({&w});
  const std::vector<Variable*> slots = adam.slot_variables();
  ASSERT_EQ(slots.size(), 2u);
  std::vector<float> m(static_cast<size_t>(n), 0.0f), v = m;
  for (int64_t i = 0; i < 16; ++i) v[static_cast<size_t>(i)] = 1e-4f;                  // m +0, v not
  for (int64_t i = 16; i < 32; ++i) m[static_cast<size_t>(i)] = 1e-3f;                 // v +0, m not
  for (int64_t i = 32; i < 48; ++i) m[static_cast<size_t>(i)] = -0.0f;                 // m -0
  slots[0]->assign(host({n}, m));
  slots[1]->assign(host({n}, v));
  testing::AdamReference ref{std::vector<float>(static_cast<size_t>(n), 0.25f), m, v};
  const std::vector<float> g(static_cast<size_t>(n), 0.0f);
  adam.apply_gradients({host({n}, g)}, {&w});
  testing::adam_reference_step(ref, g, 0.01f, 1);
  expect_same_bits(w.value().to_vector(), ref.w, "w");
  expect_same_bits(slots[0]->value().to_vector(), ref.m, "m");
  expect_same_bits(slots[1]->value().to_vector(), ref.v, "v");
}

// With weight decay no block is left as it is: zero gradients still shrink the weights.
TEST(AdamTest, WeightDecayShrinksWeightsWhoseGradientsAreZero) {
  const int64_t n = 64;
  std::vector<float> w0(static_cast<size_t>(n), 0.5f);
  Adam adam(Adam::Options{.learning_rate = 0.01f, .weight_decay = 0.1f});
  Variable w("w", host({n}, w0), true);
  adam.apply_gradients({host({n}, std::vector<float>(static_cast<size_t>(n), 0.0f))}, {&w});
  for (float x : w.value().to_vector()) EXPECT_FLOAT_EQ(x, 0.5f - 0.5f * 0.1f * 0.01f);
}

}  // namespace
}  // namespace keel
