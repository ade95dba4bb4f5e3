// Updates split between replicas: however the replicas of one process share an update (a shard
// each, or pieces taken as they come), each element is updated once, with one replica's bits.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/device/strategy.h"
#include "framework/train/optimizers.h"

namespace keel {
namespace {

// Replicas split each update between them at element boundaries that depend on their number (and,
// across processes, on how many each runs): the result must not. 1, 2, 4 and 8 replicas (whose mean
// of equal gradients is exact; 4099 elements split at unaligned offsets), Adam and SGD with Nesterov
// momentum, 3 steps.
TEST(OptimizerTest, UpdatesAreTheSameBitsHoweverReplicasSplitThem) {
  const int64_t n = 4099;
  auto train = [&](int replicas, const std::string& name) {
    ReplicatedStrategy s(DeviceSpec::custom(replicas, 0));
    auto opt = make_optimizer(name, 0.01f, 0.9f, /*nesterov=*/true);
    std::unique_ptr<Variable> w;
    {
      auto scope = s.scope();
      std::vector<float> w0(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) w0[static_cast<size_t>(i)] = std::sin(0.37f * static_cast<float>(i));
      w = std::make_unique<Variable>("w", Tensor::from_vector({n}, w0), true);
    }
    for (int t = 1; t <= 3; ++t) {
      s.run_replicas([&](ReplicaContext&) {
        std::vector<float> g(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) g[static_cast<size_t>(i)] = std::cos(0.11f * static_cast<float>(i * t)) * 1e-2f;
        opt->apply_gradients({Tensor::from_vector({n}, g)}, {w.get()});
      });
    }
    return w->value().to_vector();
  };
  for (const std::string name : {"adam", "sgd"}) {
    const std::vector<float> one = train(1, name);
    for (int replicas : {2, 4, 8}) EXPECT_EQ(train(replicas, name), one) << name << " on " << replicas << " replicas";
  }
}

// In one process the replicas take the update's pieces (16K elements) as they come: over variables
// of many pieces, on 8 replicas sharing 2 threads, every element is updated once, with the bits of
// one replica's update.
TEST(OptimizerTest, UpdatePiecesTakenAsTheReplicasComeAreEachAppliedOnce) {
  const std::vector<int64_t> sizes = {70001, 16384, 3};
  auto train = [&](int replicas, const std::string& name) {
    ReplicatedStrategy s(DeviceSpec::custom(replicas, 0), ReplicatedStrategy::Options{.host_threads = 2});
    auto opt = make_optimizer(name, 0.01f, 0.9f, /*nesterov=*/false);
    std::vector<std::unique_ptr<Variable>> ws;
    {
      auto scope = s.scope();
      for (size_t v = 0; v < sizes.size(); ++v) {
        std::vector<float> w0(static_cast<size_t>(sizes[v]));
        for (size_t i = 0; i < w0.size(); ++i) w0[i] = std::sin(0.37f * static_cast<float>(i + 7 * v));
        ws.push_back(std::make_unique<Variable>("w" + std::to_string(v), Tensor::from_vector({sizes[v]}, w0), true));
      }
    }
    std::vector<Variable*> vars;
    for (const auto& w : ws) vars.push_back(w.get());
    for (int t = 1; t <= 3; ++t) {
      s.run_replicas([&](ReplicaContext& ctx) {
        std::vector<Tensor> grads;
        for (size_t v = 0; v < sizes.size(); ++v) {
          std::vector<float> g(static_cast<size_t>(sizes[v]));
          for (size_t i = 0; i < g.size(); ++i) {
            g[i] = std::cos(0.11f * static_cast<float>(i * static_cast<size_t>(t) + v)) * 1e-2f;
          }
          grads.push_back(Tensor::from_vector({sizes[v]}, g));
        }
        EXPECT_TRUE(opt->apply_gradients(grads, vars).applied) << ctx.replica_id();
      });
    }
    std::vector<std::vector<float>> out;
    for (Variable* v : vars) out.push_back(v->value().to_vector());
    return out;
  };
  for (const std::string name : {"adam", "sgd"}) {
    const auto one = train(1, name);
    for (int replicas : {2, 8}) EXPECT_EQ(train(replicas, name), one) << name << " on " << replicas << " replicas";
  }
}

}  // namespace
}  // namespace keel
