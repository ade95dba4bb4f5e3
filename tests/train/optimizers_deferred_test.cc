// Dense kernels' gradients left to the optimizer's all-reduce (defers_kernel_gradients,
// framework/device/deferred_product.h) change who computes them and when, never the numbers nor
// what each core is charged: the seed MLP on v3-8, trained with and without, on one host thread and
// on two, ends with the same weights and Adam slots bit for bit and the same ledger per core; and a
// matrix product's backward does defer the kernel's gradient where a step allows it. Likewise an
// update that ends its run without a closing barrier (ReplicaContext::set_update_ends_run).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "framework/autodiff/tape.h"
#include "framework/core/random.h"
#include "framework/device/replica_context.h"
#include "framework/layers/initializers.h"
#include "framework/model/planner.h"
#include "framework/ops/ops.h"
#include "framework/train/optimizers.h"
#include "tests/support/training_cases.h"

namespace keel {
namespace {

// 12 steps of the seed MLP on v3-8 (16 per core) on random batches, deferring or not.
testing::TrainedState train_mlp(bool defer, int host_threads) {
  const testing::DeferredKernelGradients setting(defer);
  clear_session();
  set_random_seed(5);
  const testing::Case c{"mlp", {784}, DeviceSpec::preset("v3-8"), 16};
  ReplicatedStrategy strategy(c.device, ReplicatedStrategy::Options{.host_threads = host_threads});
  std::unique_ptr<Model> model;
  {
    auto scope = strategy.scope();
    model = testing::build_compiled(c);
  }
  for (int s = 0; s < 12; ++s) model->train_step(testing::random_batch(c, 300 + static_cast<uint64_t>(s)));
  return testing::trained_state(*model, strategy.ledger());
}

TEST(DeferredKernelGradients, MlpOnV38EndsBitIdenticalAndChargedAlike) {
  for (int threads : {1, 2}) {
    testing::expect_same_trained_state(train_mlp(false, threads), train_mlp(true, threads),
                                       std::to_string(threads) + " thread(s), deferred");
  }
}

// A 784 x 128 kernel (a mirrored variable of `strategy`) and inputs: ramps of period `period` around 0.
std::vector<float> ramp(size_t n, int64_t period, float step) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = step * static_cast<float>(static_cast<int64_t>(i) % period - period / 2);
  return v;
}
std::unique_ptr<Variable> kernel_784x128(ReplicatedStrategy& strategy, int64_t period) {
  auto scope = strategy.scope();
  return std::make_unique<Variable>("w", Tensor::from_vector({784, 128}, ramp(784 * 128, period, 0.001f)).clone(), true);
}

// x (16 x 784) · w (784 x 128) in a replica allowed to defer: the kernel's gradient is left to the
// all-reduce, and computed on demand it has the bits of the product computed whole.
TEST(DeferredKernelGradients, AMatrixProductLeavesItsKernelsGradientToTheAllReduce) {
  ReplicatedStrategy strategy(DeviceSpec::custom(2, 0), ReplicatedStrategy::Options{.host_threads = 1});
  const std::unique_ptr<Variable> w = kernel_784x128(strategy, 977);
  const std::vector<float> xs = ramp(16 * 784, 331, 0.01f);
  std::vector<std::vector<float>> gradients(2);  // deferred then materialized, computed whole
  bool was_deferred = false;
  strategy.run_replicas([&](ReplicaContext& ctx) {
    for (bool defer : {true, false}) {
      ctx.allow_deferred_products(defer);
      const Tensor x = Tensor::from_vector({16, 784}, xs).clone();
      GradientTape tape;
      const Tensor loss = ops::reduce_sum(ops::scale(ops::relu(ops::matmul(x, w->value())), 0.37f));
      const std::vector<Tensor> g = tape.gradient(loss, std::vector<Variable*>{w.get()});
      if (defer) {
        const std::vector<const DeferredProduct*> products = ctx.deferred_products(g);
        if (ctx.replica_id() == 0) was_deferred = products.size() == 1 && products[0] != nullptr;
        ctx.materialize(g[0]);
        EXPECT_TRUE(ctx.deferred_products(g).empty() || ctx.deferred_products(g)[0] == nullptr);
      }
      if (ctx.replica_id() == 0) gradients[defer ? 0 : 1] = g[0].to_vector();
      ctx.allow_deferred_products(false);
    }
  });
  EXPECT_EQ(was_deferred, kChainedProductsVectorized);  // a build without their vector forms leaves them to oneDNN
  ASSERT_EQ(gradients[0].size(), gradients[1].size());
  EXPECT_EQ(std::memcmp(gradients[0].data(), gradients[1].data(), gradients[0].size() * sizeof(float)), 0);
}

// An infeed shard taken in place from its batch (ReplicatedStrategy::distribute): the deferred
// product reads x where the batch holds it, not a copy, and keeps that memory once the shard is
// gone; computed on demand it has the bits of the product computed whole.
TEST(DeferredKernelGradients, AProductOfAnInfeedShardReadsItsBatchInPlace) {
  ReplicatedStrategy strategy(DeviceSpec::custom(2, 0), ReplicatedStrategy::Options{.host_threads = 1});
  const std::unique_ptr<Variable> w = kernel_784x128(strategy, 967);
  const std::vector<float> xs = ramp(32 * 784, 347, 0.01f);
  Batch batch{Tensor::from_vector({32, 784}, xs), Tensor()};
  const std::weak_ptr<Storage> memory = batch.images.weak_storage();
  std::vector<Batch> shards = strategy.distribute(std::move(batch));
  std::vector<std::vector<float>> gradients(2);  // computed whole, then deferred
  bool in_place = false;
  strategy.run_replicas([&](ReplicaContext& ctx) {
    const size_t r = static_cast<size_t>(ctx.replica_id());
    for (bool defer : {false, true}) {
      ctx.allow_deferred_products(defer);
      const float* x_memory = std::as_const(shards[r].images).data();
      std::vector<Tensor> g;
      {
        GradientTape tape;
        const Tensor loss = ops::reduce_sum(ops::scale(ops::relu(ops::matmul(shards[r].images, w->value())), 0.41f));
        g = tape.gradient(loss, std::vector<Variable*>{w.get()});
      }
      if (defer) {
        shards[r] = Batch{};  // the product alone keeps x's bytes
        const std::vector<const DeferredProduct*> products = ctx.deferred_products(g);
        if (r == 0) in_place = products.size() == 1 && products[0] != nullptr && products[0]->operands.x == x_memory;
        ctx.materialize(g[0]);
      }
      if (r == 0) gradients[defer ? 1 : 0] = g[0].to_vector();
      ctx.allow_deferred_products(false);
    }
  });
  EXPECT_TRUE(memory.expired());
  EXPECT_EQ(in_place, kChainedProductsVectorized);
  ASSERT_EQ(gradients[0].size(), gradients[1].size());
  EXPECT_EQ(std::memcmp(gradients[0].data(), gradients[1].data(), gradients[0].size() * sizeof(float)), 0);
}

// A kernel read by two products: the tape must add its two gradients, so it computes both whole
// first; the sum has the bits of the one computed without deferring.
TEST(DeferredKernelGradients, TheTapeComputesDeferredGradientsItMustAdd) {
  ReplicatedStrategy strategy(DeviceSpec::custom(2, 0), ReplicatedStrategy::Options{.host_threads = 1});
  const std::unique_ptr<Variable> w = kernel_784x128(strategy, 983);
  const std::vector<float> xs = ramp(16 * 784, 337, 0.01f);
  std::vector<std::vector<float>> gradients(2);  // deferring, then not
  strategy.run_replicas([&](ReplicaContext& ctx) {
    for (bool defer : {true, false}) {
      ctx.allow_deferred_products(defer);
      const Tensor x = Tensor::from_vector({16, 784}, xs).clone();
      const Tensor x2 = ops::scale(x, -0.5f);
      GradientTape tape;
      const Tensor loss = ops::add(ops::reduce_sum(ops::relu(ops::matmul(x, w->value()))),
                                   ops::reduce_sum(ops::relu(ops::matmul(x2, w->value()))));
      const std::vector<Tensor> g = tape.gradient(loss, std::vector<Variable*>{w.get()});
      const std::vector<const DeferredProduct*> left = ctx.deferred_products(g);
      EXPECT_TRUE(left.empty() || left[0] == nullptr) << "the added gradient is computed";
      if (ctx.replica_id() == 0) gradients[defer ? 0 : 1] = g[0].to_vector();
      ctx.allow_deferred_products(false);
    }
  });
  ASSERT_EQ(gradients[0].size(), gradients[1].size());
  EXPECT_EQ(std::memcmp(gradients[0].data(), gradients[1].data(), gradients[0].size() * sizeof(float)), 0);
}

// On one replica the all-reduce has nothing to sum: a deferred gradient is computed whole where the
// optimizer reads it.
TEST(DeferredKernelGradients, OneReplicaComputesADeferredGradientWhole) {
  ReplicatedStrategy strategy(DeviceSpec::custom(1, 0), ReplicatedStrategy::Options{.host_threads = 1});
  const std::unique_ptr<Variable> w = kernel_784x128(strategy, 971);
  const std::vector<float> xs = ramp(16 * 784, 331, 0.01f);
  std::vector<std::vector<float>> reduced(2);  // deferring, then not
  strategy.run_replicas([&](ReplicaContext& ctx) {
    for (bool defer : {true, false}) {
      ctx.allow_deferred_products(defer);
      const Tensor x = Tensor::from_vector({16, 784}, xs).clone();
      GradientTape tape;
      const Tensor loss = ops::reduce_sum(ops::relu(ops::matmul(x, w->value())));
      std::vector<Tensor> g = tape.gradient(loss, std::vector<Variable*>{w.get()});
      std::vector<const float*> results(1);
      EXPECT_EQ(ctx.all_reduce_for_update(ReduceOp::Mean, g, false, results), 1u);
      reduced[defer ? 0 : 1].assign(results[0], results[0] + g[0].size());
      ctx.allow_deferred_products(false);
    }
  });
  ASSERT_EQ(reduced[0].size(), reduced[1].size());
  EXPECT_EQ(std::memcmp(reduced[0].data(), reduced[1].data(), reduced[0].size() * sizeof(float)), 0);
}

// In one process an update that ends the run skips its closing barrier: every replica of the next
// run reads it whole, the bits of the same update closed by its barrier, which every replica reads
// whole as soon as that barrier is passed.
TEST(UpdateEndsRun, TheNextRunReadsTheWholeUpdateBitIdentical) {
  ReplicatedStrategy s(DeviceSpec::custom(8, 0), ReplicatedStrategy::Options{.host_threads = 2});
  constexpr int64_t kSize = 1 << 17;  // each replica updates its slice
  std::vector<std::unique_ptr<Variable>> vars;  // [0] updated ending the run, [1] closed by a barrier
  {
    auto scope = s.scope();
    for (const char* name : {"ends", "closes"}) vars.push_back(std::make_unique<Variable>(name, Tensor::zeros({kSize}), true));
  }
  Adam ends_run, closes;
  const std::vector<Batch> shards(8);
  const auto gradient = [](int replica, int step) {
    std::vector<float> g(static_cast<size_t>(kSize));
    for (int64_t i = 0; i < kSize; ++i) g[static_cast<size_t>(i)] = std::sin(0.001f * static_cast<float>(i * (replica + 1) + step));
    return Tensor::from_vector({kSize}, g);
  };
  std::vector<float> closed_last(static_cast<size_t>(kSize), 0.0f);
  for (int step = 0; step < 3; ++step) {
    struct Seen {
      std::vector<float> at_start, closed;
    };
    const std::vector<Seen> seen = s.run(
        [&](const Batch&) {
          ReplicaContext& ctx = *current_replica_context();
          Seen out;
          out.at_start = vars[0]->value().to_vector();  // before this replica's first meeting of the run
          ctx.set_update_ends_run(false);
          closes.apply_gradients({gradient(ctx.replica_id(), step)}, {vars[1].get()});
          out.closed = vars[1]->value().to_vector();
          ctx.set_update_ends_run(true);
          ends_run.apply_gradients({gradient(ctx.replica_id(), step)}, {vars[0].get()});
          return out;
        },
        shards);
    for (int r = 0; r < 8; ++r) {
      EXPECT_EQ(seen[r].at_start, closed_last) << "replica " << r << " at step " << step;
      EXPECT_EQ(seen[r].closed, vars[1]->value().to_vector()) << "replica " << r << " at step " << step;
    }
    closed_last = vars[1]->value().to_vector();
    EXPECT_EQ(vars[0]->value().to_vector(), closed_last) << "step " << step;
  }
  EXPECT_NE(closed_last, std::vector<float>(static_cast<size_t>(kSize), 0.0f));
}

}  // namespace
}  // namespace keel
