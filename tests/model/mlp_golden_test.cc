// keel's MLP against an independent implementation: tests/golden/mlp_small.json, produced with
// PyTorch in float64 by bench/golden_mlp.py (Dense(20->8, relu) -> Dense(8->4, softmax) on a fixed
// batch of 6, categorical cross-entropy; logits, probabilities, loss, gradients, and 3 steps each of
// Keras's Adam, SGD with momentum and SGD with Nesterov momentum).
#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "framework/autodiff/tape.h"
#include "framework/layers/core_layers.h"
#include "framework/model/model.h"
#include "framework/train/losses.h"
#include "framework/train/optimizers.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using nlohmann::json;

const json& golden() {
  static const json doc = [] {
    std::ifstream in(std::string(KEEL_TESTS_DIR) + "/golden/mlp_small.json");
    if (!in) throw std::runtime_error("cannot open " + std::string(KEEL_TESTS_DIR) + "/golden/mlp_small.json");
    return json::parse(in);
  }();
  return doc;
}

Tensor tensor_of(const json& t) {
  Shape shape = t.at("shape").get<Shape>();
  std::vector<float> v;
  for (double d : t.at("values")) v.push_back(static_cast<float>(d));
  return Tensor::from_vector(shape, v);
}

// Every element within abs + rel * |want|; reports how many are not and the worst one.
void expect_matches(const Tensor& got, const json& want, double rel, double abs, const std::string& what) {
  ASSERT_EQ(got.shape(), want.at("shape").get<Shape>()) << what;
  const std::vector<float> g = got.to_vector();
  const std::vector<double> w = want.at("values").get<std::vector<double>>();
  int64_t bad = 0, worst = -1;
  double worst_ratio = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    const double ratio = std::fabs(g[i] - w[i]) / (abs + rel * std::fabs(w[i]));
    if (!(ratio <= 1)) ++bad;
    if (!(ratio <= worst_ratio)) {
      worst_ratio = ratio;
      worst = static_cast<int64_t>(i);
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << w.size() << " elements out of tolerance; worst at "
                    << testing::index_string(got.shape(), worst) << ": keel " << g[static_cast<size_t>(worst)]
                    << ", reference " << w[static_cast<size_t>(worst)];
}

void expect_scalar(double got, double want, double rel, const std::string& what) {
  EXPECT_NEAR(got, want, rel * std::fabs(want)) << what;
}

class MlpGoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_THROW(golden());
    x_ = tensor_of(golden().at("x"));
    y_ = tensor_of(golden().at("y"));
  }

  // The golden model with the golden initial weights.
  std::unique_ptr<Sequential> make_model() {
    clear_session();
    auto model = std::make_unique<Sequential>(std::vector<LayerPtr>{Dense(8, "relu", Shape{20}), Dense(4, "softmax")});
    const json& w = golden().at("initial_weights");
    for (Variable* v : model->variables()) {
      const Tensor value = tensor_of(w.at(v->name()));
      EXPECT_EQ(v->shape(), value.shape()) << v->name();
      v->assign(value);
    }
    return model;
  }

  const json& f64() const { return golden().at("f64"); }

  // Three train_steps with `optimizer`: the loss seen by each, the loss after, the final weights.
  void check_optimizer(std::shared_ptr<Optimizer> optimizer, const json& ref, const std::string& what) {
    std::unique_ptr<Sequential> model = make_model();
    model->compile(std::move(optimizer), std::make_shared<CategoricalCrossentropy>());
    const std::vector<double> losses = ref.at("losses").get<std::vector<double>>();
    ASSERT_EQ(losses.size(), 3u);
    for (size_t step = 0; step < losses.size(); ++step) {
      const StepTotals t = model->train_step(Batch{x_, y_});
      ASSERT_EQ(t.samples, 6);
      expect_scalar(t.loss_sum / static_cast<double>(t.samples), losses[step], 1e-5,
                    what + ": loss before update " + std::to_string(step + 1));
    }
    EXPECT_EQ(model->optimizer().iterations(), 3);
    for (Variable* v : model->variables()) {
      expect_matches(v->value(), ref.at("weights").at(v->name()), 1e-5, 1e-6, what + ": final " + v->name());
    }
    const StepTotals after = model->test_step(Batch{x_, y_});
    expect_scalar(after.loss_sum / static_cast<double>(after.samples), ref.at("final_loss").get<double>(), 1e-5,
                  what + ": loss after the last update");
  }

  Tensor x_, y_;
};

TEST_F(MlpGoldenTest, VariablesHaveKerasNamesAndShapes) {
  std::unique_ptr<Sequential> model = make_model();
  std::vector<std::string> names;
  for (Variable* v : model->variables()) names.push_back(v->name());
  EXPECT_EQ(names, golden().at("weight_names").get<std::vector<std::string>>());
}

TEST_F(MlpGoldenTest, ForwardLogitsProbabilitiesAndLoss) {
  std::unique_ptr<Sequential> model = make_model();
  Tensor probs = (*model)(x_);
  expect_matches(probs, f64().at("probabilities"), 1e-5, 1e-7, "probabilities");
  ASSERT_TRUE(probs.keras_logits().defined()) << "a softmax Dense output remembers its logits";
  expect_matches(probs.keras_logits(), f64().at("logits"), 1e-5, 1e-6, "logits");
  Tensor loss = CategoricalCrossentropy()(y_, probs);
  expect_scalar(loss.item(), f64().at("loss").get<double>(), 1e-5, "loss");
}

TEST_F(MlpGoldenTest, GradientsOfEveryWeight) {
  std::unique_ptr<Sequential> model = make_model();
  std::vector<Variable*> vars = model->trainable_variables();
  ASSERT_EQ(vars.size(), 4u);
  std::vector<Tensor> grads;
  {
    GradientTape tape;
    Tensor probs = (*model)(x_, /*training=*/true);
    Tensor loss = CategoricalCrossentropy()(y_, probs);
    grads = tape.gradient(loss, vars);
  }
  for (size_t i = 0; i < vars.size(); ++i) {
    ASSERT_TRUE(grads[i].defined()) << vars[i]->name();
    expect_matches(grads[i], f64().at("gradients").at(vars[i]->name()), 1e-4, 1e-6, "d loss / d " + vars[i]->name());
  }
}

TEST_F(MlpGoldenTest, ThreeAdamSteps) {
  const json& c = golden().at("config").at("adam");
  Adam::Options o;
  o.learning_rate = c.at("learning_rate").get<float>();
  o.beta_1 = c.at("beta_1").get<float>();
  o.beta_2 = c.at("beta_2").get<float>();
  o.epsilon = c.at("epsilon").get<float>();
  check_optimizer(std::make_shared<Adam>(o), f64().at("adam"), "Adam");
}

TEST_F(MlpGoldenTest, ThreeSGDMomentumSteps) {
  const json& c = golden().at("config").at("sgd_momentum");
  SGD::Options o{c.at("learning_rate").get<float>(), c.at("momentum").get<float>(), c.at("nesterov").get<bool>()};
  ASSERT_FALSE(o.nesterov);
  check_optimizer(std::make_shared<SGD>(o), f64().at("sgd_momentum"), "SGD momentum");
}

TEST_F(MlpGoldenTest, ThreeSGDNesterovSteps) {
  const json& c = golden().at("config").at("sgd_nesterov");
  SGD::Options o{c.at("learning_rate").get<float>(), c.at("momentum").get<float>(), c.at("nesterov").get<bool>()};
  ASSERT_TRUE(o.nesterov);
  check_optimizer(std::make_shared<SGD>(o), f64().at("sgd_nesterov"), "SGD nesterov");
}

}  // namespace
}  // namespace keel
