// recompute_in_backward: a segment saves only its input, backward recomputes it on a tape of its own,
// and every gradient (of the input and of the variables the segment reads) is bit-identical to the
// plain tape's; outside a tape it is just the function.
#include "framework/autodiff/recompute.h"

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "framework/autodiff/tape.h"
#include "framework/device/context.h"
#include "framework/device/ledger.h"
#include "framework/ops/ops.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using testing::host;

bool same_bits(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_vector(), y = b.to_vector();
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

std::vector<float> values(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>((static_cast<int>(i) * 7919) % 23 - 11) / 7.0f;
  return v;
}

// relu(x W1) W2, summed: the first layer as a segment, or not.
struct TwoLayers {
  Variable w1{"w1", host({6, 5}, values(30, 0.3f)), true};
  Variable w2{"w2", host({5, 3}, values(15, -0.2f)), true};
  Tensor segment(const Tensor& x) const { return ops::relu(ops::matmul(x, w1.value())); }
  std::vector<Tensor> gradients(const Tensor& x, bool remat) {
    GradientTape tape;
    tape.watch(x);
    const Tensor h = remat ? recompute_in_backward([this](const Tensor& in) { return segment(in); }, x, {&w1}) : segment(x);
    const Tensor loss = ops::reduce_sum(ops::matmul(h, w2.value()));
    return tape.gradient(loss, std::vector<Tensor>{x, w1.value(), w2.value()});
  }
};

TEST(RecomputeTest, GradientsAreBitIdenticalToThePlainTape) {
  TwoLayers net;
  const Tensor x = host({4, 6}, values(24, 1.0f));
  const std::vector<Tensor> plain = net.gradients(x, false);
  const std::vector<Tensor> remat = net.gradients(x, true);
  ASSERT_EQ(plain.size(), remat.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_TRUE(remat[i].defined()) << i;
    EXPECT_TRUE(same_bits(plain[i], remat[i])) << "gradient " << i;
  }
}

TEST(RecomputeTest, OutsideATapeItIsTheFunction) {
  TwoLayers net;
  const Tensor x = host({4, 6}, values(24, 1.0f));
  int calls = 0;
  const Tensor y = recompute_in_backward([&](const Tensor& in) { ++calls; return net.segment(in); }, x, {});
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(same_bits(y, net.segment(x)));
}

// The segment runs twice (once forward, once in backward); recomputing() is true only the second
// time; a tape the caller holds records the segment as one op, not its inner ones.
TEST(RecomputeTest, RunsAgainInBackwardOnlyThenMarkedRecomputing) {
  TwoLayers net;
  const Tensor x = host({2, 6}, values(12, 1.0f));
  std::vector<bool> seen;
  GradientTape tape;
  const Tensor h = recompute_in_backward(
      [&](const Tensor& in) {
        seen.push_back(recomputing());
        return net.segment(in);
      },
      x, {&net.w1});
  EXPECT_EQ(tape.num_recorded_ops(), 1u) << "the segment is one op";
  EXPECT_EQ(seen, (std::vector<bool>{false}));
  const Tensor loss = ops::reduce_sum(h);
  const std::vector<Tensor> g = tape.gradient(loss, std::vector<Variable*>{&net.w1});
  EXPECT_EQ(seen, (std::vector<bool>{false, true}));
  EXPECT_FALSE(recomputing());
  ASSERT_TRUE(g[0].defined());
}

// A one-core ledger: during the forward pass the segment's inner activations are freed as soon as
// it returns; only its input (held by the caller here) and output stay.
TEST(RecomputeTest, SavesNothingInsideTheSegment) {
  Ledger ledger(DeviceSpec::custom(1, 0));
  DeviceContext core0;
  core0.ledger = &ledger;
  core0.core = 0;
  core0.category = Category::activations;
  ContextScope scope(core0);
  Variable w("w", Tensor::zeros({8, 8}, Category::parameters, "w"), true);
  const Tensor x = Tensor::zeros({4, 8}, Category::inputs, "x");
  auto segment = [&](const Tensor& in) {
    return ops::relu(ops::relu(ops::relu(ops::matmul(in, w.value()))));  // each relu saves its output when recorded
  };
  const int64_t one = 4 * 8 * 4;
  {
    GradientTape tape;
    const Tensor y = segment(x);
    EXPECT_EQ(ledger.core(0).stat(Category::activations).current, 3 * one) << "three saved outputs (y is the last)";
  }
  {
    GradientTape tape;
    const Tensor y = recompute_in_backward(segment, x, {&w});
    EXPECT_EQ(ledger.core(0).stat(Category::activations).current, one) << "only the segment's output";
    const std::vector<Tensor> g = tape.gradient(ops::reduce_sum(y), std::vector<Variable*>{&w});
    EXPECT_TRUE(g[0].defined());
  }
}

}  // namespace
}  // namespace keel
