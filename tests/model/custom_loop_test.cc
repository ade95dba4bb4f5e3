// A hand-written strategy.run loop (the README's second example) and Model::train_step are one path:
// same collectives, same random streams keyed by (seed, step, replica, op) through the replica
// context, so the same steps give the same bits.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "framework/autodiff/tape.h"
#include "framework/layers/core_layers.h"
#include "framework/layers/initializers.h"
#include "framework/layers/normalization.h"
#include "framework/model/model.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using testing::host;
using testing::random_host;

std::unique_ptr<Sequential> make_model(ReplicatedStrategy& strategy) {
  set_random_seed(3);
  auto scope = strategy.scope();
  auto model = std::make_unique<Sequential>(std::vector<LayerPtr>{
      Dense(16, "relu", Shape{8}), Dropout(0.5f), BatchNormalization(), Dense(3, "softmax")});
  model->compile(std::make_shared<Adam>(), std::make_shared<SparseCategoricalCrossentropy>());
  return model;
}

Batch batch_of_step(int step) {
  std::vector<float> labels(12);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<float>((i + static_cast<size_t>(step)) % 3);
  return Batch{random_host({12, 8}, -1, 1, 50 + static_cast<uint64_t>(step)), host({12}, labels)};
}

std::vector<std::vector<float>> weights_of(const Model& model) {
  std::vector<std::vector<float>> out;
  for (Variable* v : model.variables()) out.push_back(v->value().to_vector());
  return out;
}

bool bitwise_equal(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0) return false;
  }
  return true;
}

TEST(CustomLoopTest, DrawsTheSameDropoutMasksAndWeightsAsTrainStep) {
  constexpr int kSteps = 4;
  ReplicatedStrategy fit_strategy(DeviceSpec::custom(3, 0));
  std::unique_ptr<Sequential> fitted = make_model(fit_strategy);
  for (int step = 0; step < kSteps; ++step) fitted->train_step(batch_of_step(step));

  ReplicatedStrategy loop_strategy(DeviceSpec::custom(3, 0));
  std::unique_ptr<Sequential> model = make_model(loop_strategy);
  const std::vector<Variable*> vars = model->trainable_variables();
  for (int step = 0; step < kSteps; ++step) {
    loop_strategy.run_distributed(
        [&](const Batch& b) {
          GradientTape tape;
          Tensor loss = model->loss()(b.labels, (*model)(b.images, /*training=*/true));
          model->optimizer().apply_gradients(tape.gradient(loss, vars), vars);
          return loss.item();
        },
        batch_of_step(step));
  }
  EXPECT_EQ(model->optimizer().iterations(), kSteps);
  EXPECT_TRUE(bitwise_equal(weights_of(*model), weights_of(*fitted)))
      << "a custom loop and train_step must draw the same masks and sum in the same order";
}

// The dropout output of replica `replica` in step `step` of a custom loop on a fresh strategy.
std::vector<float> dropout_output(int64_t step, int replica) {
  ReplicatedStrategy s(DeviceSpec::custom(2, 0));
  auto dropout = std::make_shared<layers::Dropout>(0.5f, /*seed=*/7);
  s.set_step(step);
  std::vector<std::vector<float>> out(2);
  s.run_replicas([&](ReplicaContext& ctx) {
    EXPECT_EQ(ctx.step(), step);
    out[static_cast<size_t>(ctx.replica_id())] = (*dropout)(Tensor::full({4, 16}, 1.0f), /*training=*/true).to_vector();
  });
  EXPECT_EQ(s.step(), step + 1) << "each run advances the step";
  return out[static_cast<size_t>(replica)];
}

TEST(CustomLoopTest, EveryStepAndReplicaDrawsItsOwnMask) {
  EXPECT_EQ(dropout_output(0, 0), dropout_output(0, 0)) << "a function of (seed, step, replica)";
  EXPECT_NE(dropout_output(0, 0), dropout_output(1, 0)) << "two steps, two masks";
  EXPECT_NE(dropout_output(0, 0), dropout_output(0, 1)) << "two replicas, two masks";
}

TEST(CustomLoopTest, ConsecutiveRunsAdvanceTheStep) {
  ReplicatedStrategy s(DeviceSpec::custom(1, 0));
  auto dropout = std::make_shared<layers::Dropout>(0.5f, /*seed=*/7);
  auto run_once = [&] {
    return s.run_distributed([&](const Batch& b) { return (*dropout)(b.images, /*training=*/true).to_vector(); },
                             Batch{Tensor::full({4, 16}, 1.0f), Tensor()})[0];
  };
  const std::vector<float> first = run_once();
  const std::vector<float> second = run_once();
  EXPECT_NE(first, second) << "a custom loop must not draw the same mask at every step";
  EXPECT_EQ(first, dropout_output(0, 0));
  EXPECT_EQ(second, dropout_output(1, 0));
}

}  // namespace
}  // namespace keel
