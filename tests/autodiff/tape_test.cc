#include "framework/autodiff/tape.h"

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/device/context.h"
#include "framework/device/ledger.h"
#include "framework/ops/ops.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using testing::host;

TEST(GradientTapeTest, NonPersistentTapeAllowsOneGradientCall) {
  Tensor x = host({2}, {1, 2});
  GradientTape tape;
  tape.watch(x);
  Tensor y = ops::reduce_sum(ops::scale(x, 3));
  EXPECT_EQ(tape.gradient(y, {x})[0].to_vector(), (std::vector<float>{3, 3}));
  EXPECT_THROW(tape.gradient(y, {x}), std::logic_error);
}

TEST(GradientTapeTest, PersistentTapeAllowsRepeatedGradientCalls) {
  Tensor x = host({2}, {1, 2});
  GradientTape tape(/*persistent=*/true);
  tape.watch(x);
  Tensor h = ops::scale(x, 3);
  Tensor y = ops::reduce_sum(h);
  Tensor z = ops::reduce_mean(h);
  EXPECT_EQ(tape.gradient(y, {x})[0].to_vector(), (std::vector<float>{3, 3}));
  EXPECT_EQ(tape.gradient(z, {x})[0].to_vector(), (std::vector<float>{1.5f, 1.5f}));
  EXPECT_EQ(tape.gradient(y, {x})[0].to_vector(), (std::vector<float>{3, 3}));
}

TEST(GradientTapeTest, TensorUsedTwiceAccumulatesItsGradients) {
  Tensor x = host({3}, {1, -1, 2});
  GradientTape tape;
  tape.watch(x);
  // loss = sum(2x + 5x) through two separate paths from x.
  Tensor loss = ops::reduce_sum(ops::add(ops::scale(x, 2), ops::scale(x, 5)));
  EXPECT_EQ(tape.gradient(loss, {x})[0].to_vector(), (std::vector<float>{7, 7, 7}));
}

TEST(GradientTapeTest, AccumulationDoesNotWriteIntoAGradientAnotherOpStillHolds) {
  // h = 2x is used by two ops whose gradients are views of their upstream gradient (add's dy,
  // bias_add's dy): summing them in place would corrupt the other path.
  Tensor x = host({1, 2}, {1, 2});
  Tensor b = host({2}, {0, 0});
  GradientTape tape;
  tape.watch(x);
  tape.watch(b);
  Tensor h = ops::scale(x, 2);
  Tensor u = ops::bias_add(h, b);       // du/dh = 1, du/db = 1
  Tensor v = ops::add(u, h);            // h used twice
  Tensor loss = ops::reduce_sum(ops::scale(v, 3));
  std::vector<Tensor> g = tape.gradient(loss, {x, b});
  EXPECT_EQ(g[0].to_vector(), (std::vector<float>{12, 12}));  // 3 * (1 + 1) * 2
  EXPECT_EQ(g[1].to_vector(), (std::vector<float>{3, 3}));
}

TEST(GradientTapeTest, UnwatchedTensorsAreNotRecorded) {
  Tensor x = host({2}, {1, 2});
  GradientTape tape;
  Tensor y = ops::reduce_sum(ops::scale(x, 3));
  EXPECT_EQ(tape.num_recorded_ops(), 0u);
  EXPECT_FALSE(tape.gradient(y, {x})[0].defined());
}

TEST(GradientTapeTest, SourceTheTargetDoesNotDependOnHasUndefinedGradient) {
  Tensor x = host({2}, {1, 2}), other = host({2}, {3, 4});
  GradientTape tape;
  tape.watch(x);
  tape.watch(other);
  Tensor y = ops::reduce_sum(x);
  std::vector<Tensor> g = tape.gradient(y, {x, other});
  EXPECT_TRUE(g[0].defined());
  EXPECT_FALSE(g[1].defined());
}

TEST(GradientTapeTest, GradientOfTargetWithRespectToItselfIsOnes) {
  Tensor x = host({2}, {1, 2});
  GradientTape tape;
  tape.watch(x);
  Tensor y = ops::scale(x, 2);
  EXPECT_EQ(tape.gradient(y, {y})[0].to_vector(), (std::vector<float>{1, 1}));
}

TEST(GradientTapeTest, IntermediateSourceGetsItsGradient) {
  Tensor x = host({2}, {1, 2});
  GradientTape tape;
  tape.watch(x);
  Tensor h = ops::scale(x, 2);
  Tensor y = ops::reduce_sum(ops::scale(h, 5));
  std::vector<Tensor> g = tape.gradient(y, {h, x});
  EXPECT_EQ(g[0].to_vector(), (std::vector<float>{5, 5}));
  EXPECT_EQ(g[1].to_vector(), (std::vector<float>{10, 10}));
}

TEST(GradientTapeTest, TrainableVariablesAreWatchedAutomatically) {
  Variable v("w", host({2}, {1, 2}), /*trainable=*/true);
  GradientTape tape;
  Tensor y = ops::reduce_sum(ops::scale(v.value(), 4));
  EXPECT_EQ(tape.num_recorded_ops(), 2u);
  std::vector<Tensor> g = tape.gradient(y, std::vector<Variable*>{&v});
  ASSERT_TRUE(g[0].defined());
  EXPECT_EQ(g[0].to_vector(), (std::vector<float>{4, 4}));
}

TEST(GradientTapeTest, NonTrainableVariablesAreNotWatched) {
  Variable v("moving_mean", host({2}, {1, 2}), /*trainable=*/false);
  {
    GradientTape tape;
    Tensor y = ops::reduce_sum(ops::scale(v.value(), 4));
    EXPECT_EQ(tape.num_recorded_ops(), 0u);
    EXPECT_FALSE(tape.gradient(y, std::vector<Variable*>{&v})[0].defined());
  }
  {
    // ...unless watched explicitly.
    GradientTape tape;
    tape.watch(v.value());
    Tensor y = ops::reduce_sum(ops::scale(v.value(), 4));
    EXPECT_EQ(tape.gradient(y, std::vector<Variable*>{&v})[0].to_vector(), (std::vector<float>{4, 4}));
  }
}

TEST(GradientTapeTest, TwoTapesRecordTheSameOpsIndependently) {
  Tensor x = host({2}, {1, 2});
  GradientTape outer(/*persistent=*/true);
  GradientTape inner;
  outer.watch(x);
  inner.watch(x);
  Tensor y = ops::reduce_sum(ops::scale(x, 3));
  // The non-persistent inner tape releases its record; the outer one must still have its own.
  EXPECT_EQ(inner.gradient(y, {x})[0].to_vector(), (std::vector<float>{3, 3}));
  EXPECT_EQ(outer.gradient(y, {x})[0].to_vector(), (std::vector<float>{3, 3}));
}

TEST(GradientTapeTest, OpsRunDuringGradientAreNotRecorded) {
  Tensor x = host({2}, {1, 2});
  GradientTape tape(/*persistent=*/true);
  tape.watch(x);
  Tensor y = ops::reduce_sum(ops::scale(x, 3));
  const size_t before = tape.num_recorded_ops();
  tape.gradient(y, {x});
  EXPECT_EQ(tape.num_recorded_ops(), before);
}

TEST(GradientTapeTest, DeepChainDoesNotRecurse) {
  // 100k ops: a recursive backward walk would overflow the stack.
  Tensor x = host({1}, {1});
  GradientTape tape;
  tape.watch(x);
  Tensor h = x;
  for (int i = 0; i < 100000; ++i) h = ops::scale(h, 1.0f);
  std::vector<Tensor> g = tape.gradient(ops::reduce_sum(h), {x});
  EXPECT_EQ(g[0].to_vector(), (std::vector<float>{1}));
}

// A one-core ledger with no budget, and this thread's tensors on core 0 as `activations`.
class TapeLedgerTest : public ::testing::Test {
 protected:
  TapeLedgerTest() : ledger_(DeviceSpec::custom(1, 0)), scope_(core0()) {}
  DeviceContext core0() {
    DeviceContext ctx;
    ctx.ledger = &ledger_;
    ctx.core = 0;
    ctx.category = Category::activations;
    return ctx;
  }
  MemoryStat stat(Category c) const { return ledger_.core(0).stat(c); }

  Ledger ledger_;
  ContextScope scope_;
};

TEST_F(TapeLedgerTest, SavedTensorsAreReleasedByGradient) {
  Tensor x = Tensor::zeros({4, 8}, Category::inputs, "infeed:x");
  x.fill(0.5f);
  Tensor w = Tensor::zeros({8, 16}, Category::inputs, "w");
  w.fill(0.25f);
  std::vector<Tensor> grads;
  {
    GradientTape tape;
    tape.watch(x);
    tape.watch(w);
    Tensor loss;
    {
      Tensor h = ops::matmul(x, w);    // (4, 16): not saved by anyone
      Tensor r = ops::relu(h);         // saved by relu's backward
      Tensor s = ops::softmax(r);      // saved by softmax's backward
      loss = ops::reduce_sum(s);
      EXPECT_EQ(stat(Category::activations).current, 3 * 4 * 16 * 4 + 4);
    }
    // The forward's locals are gone; the tape still holds relu's and softmax's outputs.
    EXPECT_EQ(stat(Category::activations).current, 2 * 4 * 16 * 4 + 4);
    grads = tape.gradient(loss, {x, w});
    // Only `loss` itself is left.
    EXPECT_EQ(stat(Category::activations).current, 4);
  }
  EXPECT_EQ(stat(Category::activations).current, 0);
  // The results live in `workspace` until the caller drops them.
  EXPECT_EQ(stat(Category::workspace).current, x.bytes() + w.bytes());
  grads.clear();
  EXPECT_EQ(stat(Category::workspace).current, 0);
}

TEST_F(TapeLedgerTest, PersistentTapeKeepsSavedTensorsUntilDestroyed) {
  Tensor x = Tensor::zeros({2, 8}, Category::inputs, "infeed:x");
  {
    GradientTape tape(/*persistent=*/true);
    tape.watch(x);
    Tensor loss;
    {
      Tensor r = ops::relu(x);
      loss = ops::reduce_sum(r);
    }
    tape.gradient(loss, {x});
    EXPECT_EQ(stat(Category::activations).current, 2 * 8 * 4 + 4) << "relu's saved output";
    loss = Tensor();
  }
  EXPECT_EQ(stat(Category::activations).current, 0);
}

TEST_F(TapeLedgerTest, VariableGradientsAreChargedAsGradients) {
  Variable kernel("dense/kernel", Tensor::zeros({3, 2}, Category::parameters, "dense/kernel"), true);
  Variable bias("dense/bias", Tensor::zeros({2}, Category::parameters, "dense/bias"), true);
  Tensor x = Tensor::zeros({5, 3}, Category::inputs, "infeed:x");
  std::vector<Tensor> grads;
  {
    GradientTape tape;
    Tensor loss = ops::reduce_mean(ops::bias_add(ops::matmul(x, kernel.value()), bias.value()));
    grads = tape.gradient(loss, std::vector<Variable*>{&kernel, &bias});
  }
  ASSERT_TRUE(grads[0].defined());
  ASSERT_TRUE(grads[1].defined());
  EXPECT_EQ(stat(Category::gradients).current, (3 * 2 + 2) * 4);
  EXPECT_EQ(stat(Category::workspace).current, 0);
  EXPECT_EQ(stat(Category::parameters).current, (3 * 2 + 2) * 4);
  bool saw_kernel = false, saw_bias = false;
  for (const LiveAllocation& a : ledger_.core(0).live_allocations()) {
    if (a.category != Category::gradients) continue;
    saw_kernel = saw_kernel || (a.owner == "gradient:dense/kernel" && a.bytes == 24);
    saw_bias = saw_bias || (a.owner == "gradient:dense/bias" && a.bytes == 8);
  }
  EXPECT_TRUE(saw_kernel);
  EXPECT_TRUE(saw_bias);
  grads.clear();
  EXPECT_EQ(stat(Category::gradients).current, 0);
}

// on_ready: each variable's gradient is passed once, as soon as no op left in backward reads the
// variable, in the order backward finishes them (here the last layer's first), and what the hook
// returns is what the tape keeps and returns.
TEST_F(TapeLedgerTest, OnReadySeesEachGradientOnceWhenFinal) {
  Variable w1("w1", Tensor::zeros({3, 4}, Category::parameters, "w1"), true);
  Variable w2("w2", Tensor::zeros({4, 2}, Category::parameters, "w2"), true);
  Variable unused("unused", Tensor::zeros({2}, Category::parameters, "unused"), true);
  w1.mutable_value().fill(0.5f);
  w2.mutable_value().fill(-0.25f);
  Tensor x = Tensor::zeros({5, 3}, Category::inputs, "infeed:x");
  x.fill(1.0f);
  std::vector<Tensor> plain;
  {
    GradientTape tape;
    Tensor loss = ops::reduce_sum(ops::matmul(ops::relu(ops::matmul(x, w1.value())), w2.value()));
    plain = tape.gradient(loss, std::vector<Variable*>{&w1, &w2, &unused});
  }
  std::vector<size_t> order;
  std::vector<int64_t> live_workspace_at_call;
  std::vector<Tensor> hooked;
  {
    GradientTape tape;
    Tensor loss = ops::reduce_sum(ops::matmul(ops::relu(ops::matmul(x, w1.value())), w2.value()));
    hooked = tape.gradient(loss, std::vector<Variable*>{&w1, &w2, &unused}, [&](size_t i, Tensor g) {
      order.push_back(i);
      EXPECT_EQ(g.to_vector(), plain[i].to_vector()) << "the final gradient, " << i;
      return ops::scale(g, 2.0f);
    });
  }
  EXPECT_EQ(order, (std::vector<size_t>{1, 0})) << "w2 is final first; unused has no gradient";
  ASSERT_FALSE(hooked[2].defined());
  for (size_t i = 0; i < 2; ++i) {
    std::vector<float> want = plain[i].to_vector();
    for (float& v : want) v *= 2.0f;
    EXPECT_EQ(hooked[i].to_vector(), want) << i;
  }
}

// A variable read by two ops is final only after the earlier one's backward, once both
// contributions are summed.
TEST(GradientTapeTest, OnReadyWaitsForEveryUseOfAVariable) {
  Variable w("w", host({2}, {1, 2}), true);
  GradientTape tape;
  Tensor loss = ops::reduce_sum(ops::add(ops::scale(w.value(), 3), ops::scale(w.value(), 4)));
  int calls = 0;
  const std::vector<Tensor> g = tape.gradient(loss, std::vector<Variable*>{&w}, [&](size_t, Tensor grad) {
    ++calls;
    EXPECT_EQ(grad.to_vector(), (std::vector<float>{7, 7}));
    return grad;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(g[0].to_vector(), (std::vector<float>{7, 7}));
}

// BackwardOwnerHook: backward calls it once each time it moves on to the ops of another owner, in
// reverse order of the forward, and holds what it returns until it moves on (ZeRO-3 gathers a layer's
// weights for exactly that span).
TEST(GradientTapeTest, BackwardOwnerHookSeesEachOwnersOpsOnceAndHoldsItsToken) {
  Tensor x = host({2}, {1, 2});
  std::vector<std::string> entered;
  int live_tokens = 0, most_live = 0;
  std::vector<Tensor> g;
  {
    const BackwardOwnerHook hook([&](const std::string& owner) -> std::shared_ptr<void> {
      entered.push_back(owner);
      most_live = std::max(most_live, ++live_tokens);
      return std::shared_ptr<void>(nullptr, [&](void*) { --live_tokens; });
    });
    GradientTape tape;
    tape.watch(x);
    Tensor h;
    {
      OwnerScope a("activation:a");
      h = ops::scale(ops::scale(x, 2), 3);  // two ops of owner a
    }
    Tensor loss;
    {
      OwnerScope b("activation:b");
      loss = ops::reduce_sum(ops::scale(h, 5));
    }
    g = tape.gradient(loss, {x});
  }
  EXPECT_EQ(entered, (std::vector<std::string>{"activation:b", "activation:a"}));
  EXPECT_EQ(most_live, 1) << "the previous owner's token is dropped before the next one's is taken";
  EXPECT_EQ(live_tokens, 0) << "and the last one when gradient() returns";
  EXPECT_EQ(g[0].to_vector(), (std::vector<float>{30, 30}));
}

}  // namespace
}  // namespace keel
