// BatchNormalization's moving statistics along a training trajectory (issue 17): a conv+BN network
// with a ResNet basic block, trained by Model::train_step for 60 Adam steps from generated weights
// on generated batches, matches PyTorch (float64, tests/golden/bn_trajectory.json, written by
// bench/golden_bn_trajectory.py) after every step, on 1 and on 8 replicas. A lag — a wrong momentum,
// an update from stale weights or from one replica — would grow along the 60 steps.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "framework/layers/conv_layers.h"
#include "framework/layers/core_layers.h"
#include "framework/layers/initializers.h"
#include "framework/layers/layer.h"
#include "framework/layers/normalization.h"
#include "framework/model/functional.h"
#include "framework/train/losses.h"
#include "framework/train/optimizers.h"
#include "tests/support/golden.h"

namespace keel {
namespace {

using nlohmann::json;
using testing::generate;

const json& trajectory_golden() { return testing::load_golden("bn_trajectory.json"); }

KerasTensor conv_bn(const KerasTensor& x, const std::string& conv, const std::string& bn, bool relu) {
  layers::Conv2D::Options o;
  o.padding = "same";
  o.use_bias = false;
  o.name = conv;
  const json& d = trajectory_golden();
  KerasTensor y = (*Conv2D(d.at("filters").get<int64_t>(), 3, o))(x);
  y = (*BatchNormalization(d.at("momentum").get<float>(), d.at("epsilon").get<float>(), bn))(y);
  return relu ? (*Activation("relu"))(y) : y;
}

// The initial value bench/golden_bn_trajectory.py gives each variable.
Tensor initial_value(const Variable& v) {
  const std::string kind = v.name().substr(v.name().rfind('/') + 1);
  const Shape& s = v.shape();
  if (kind == "kernel") {
    const int64_t receptive = s.size() == 4 ? s[0] * s[1] : 1;
    const double fans = static_cast<double>(receptive * (s[s.size() - 2] + s.back()));
    return generate(v.name(), s, {0.0, static_cast<float>(std::sqrt(6.0 / fans))});
  }
  if (kind == "gamma") return generate(v.name(), s, {1.0, 0.2f});
  if (kind == "beta") return generate(v.name(), s, {0.0, 0.1f});
  if (kind == "moving_variance") return Tensor::full(s, 1.0f);
  return Tensor::zeros(s);  // moving_mean, the Dense bias
}

std::unique_ptr<Functional> build_model(ReplicatedStrategy& strategy) {
  clear_session();
  auto scope = strategy.scope();
  const json& d = trajectory_golden();
  KerasTensor input = Input(d.at("input_shape").get<Shape>());
  KerasTensor x = conv_bn(input, "conv1", "bn1", /*relu=*/true);
  KerasTensor y = conv_bn(x, "block_1_conv", "block_1_bn", /*relu=*/true);
  y = conv_bn(y, "block_2_conv", "block_2_bn", /*relu=*/false);
  y = (*Activation("relu"))((*Add())({x, y}));
  y = (*GlobalAveragePooling2D())(y);
  layers::Dense::Options head;
  head.activation = "softmax";
  head.name = "predictions";
  y = (*Dense(d.at("classes").get<int64_t>(), head))(y);
  auto model = std::make_unique<Functional>(input, y, "bn_trajectory");
  model->compile(std::make_shared<Adam>(), std::make_shared<SparseCategoricalCrossentropy>());
  for (Variable* v : model->variables()) v->assign(initial_value(*v));
  return model;
}

Batch batch_of_step(int step) {
  const json& d = trajectory_golden();
  Shape shape = d.at("input_shape").get<Shape>();
  const int64_t batch = d.at("batch").get<int64_t>();
  shape.insert(shape.begin(), batch);
  const std::string key = "bn_trajectory/y/" + std::to_string(step);
  std::vector<float> labels(static_cast<size_t>(batch));
  for (size_t i = 0; i < labels.size(); ++i) {
    labels[i] = static_cast<float>(testing::splitmix64(testing::fnv1a64(key), i) % d.at("classes").get<uint64_t>());
  }
  return Batch{generate("bn_trajectory/x/" + std::to_string(step), shape, {0.5, 1.5}),
               Tensor::from_vector({batch}, labels)};
}

Variable* find_variable(const Model& model, const std::string& name) {
  for (Variable* v : model.variables()) {
    if (v->name() == name) return v;
  }
  ADD_FAILURE() << "no variable " << name;
  return nullptr;
}

// Trains on `replicas` cores and compares every BN's moving statistics with the golden run after
// every step. float32 against float64 over 60 steps: within 2e-6 of the statistic's scale.
void expect_trajectory(int replicas) {
  const json* run = nullptr;
  for (const json& r : trajectory_golden().at("runs")) {
    if (r.at("replicas").get<int>() == replicas) run = &r;
  }
  ASSERT_NE(run, nullptr) << "no golden run on " << replicas << " replicas";
  ReplicatedStrategy strategy(DeviceSpec::custom(replicas, 0));
  std::unique_ptr<Functional> model = build_model(strategy);
  const int steps = trajectory_golden().at("steps").get<int>();
  double worst = 0.0;
  for (int step = 0; step < steps; ++step) {
    const StepTotals totals = model->train_step(batch_of_step(step));
    const double want_loss = run->at("losses").at(static_cast<size_t>(step)).get<double>();
    EXPECT_NEAR(totals.loss_sum / static_cast<double>(totals.samples), want_loss, 1e-4 * want_loss) << "step " << step;
    for (const auto& [bn, stats] : run->at("moving").items()) {
      for (const auto& [stat, per_step] : stats.items()) {
        Variable* v = find_variable(*model, bn + "/" + stat);
        ASSERT_NE(v, nullptr);
        const std::vector<float> got = v->value().to_vector();
        const std::vector<double> want = per_step.at(static_cast<size_t>(step)).get<std::vector<double>>();
        ASSERT_EQ(got.size(), want.size());
        for (size_t c = 0; c < want.size(); ++c) {
          const double err = std::fabs(got[c] - want[c]) / std::max(1.0, std::fabs(want[c]));
          worst = std::max(worst, err);
          EXPECT_LE(err, 2e-6) << bn << "/" << stat << "[" << c << "] after step " << step + 1 << ": " << got[c]
                               << " vs " << want[c];
        }
      }
    }
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.2e", worst);
  ::testing::Test::RecordProperty("worst_relative_error", text);
}

TEST(BatchNormalizationTrajectoryTest, OneReplicaFollowsPyTorchForSixtySteps) { expect_trajectory(1); }

TEST(BatchNormalizationTrajectoryTest, EightReplicasFollowPerReplicaPyTorchForSixtySteps) { expect_trajectory(8); }

}  // namespace
}  // namespace keel
