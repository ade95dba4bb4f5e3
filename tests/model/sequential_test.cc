#include "framework/model/model.h"

#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/data/dataset.h"
#include "framework/core/random.h"
#include "framework/layers/core_layers.h"
#include "framework/layers/initializers.h"
#include "framework/train/losses.h"
#include "framework/train/optimizers.h"

namespace keel {
namespace {

using ::testing::HasSubstr;

// Keras's MNIST MLP: 784 -> 128 relu -> 10 softmax.
std::unique_ptr<Sequential> make_mlp() {
  return std::make_unique<Sequential>(std::vector<LayerPtr>{Dense(128, "relu", Shape{784}), Dense(10, "softmax")});
}

// The summary row of a layer: the line that starts with " <name> (<Class>)".
std::string row_of(const std::string& summary, const std::string& layer) {
  std::istringstream in(summary);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(" " + layer + " ", 0) == 0) return line;
  }
  return "";
}

TEST(SequentialTest, SummaryOfTheMlp) {
  clear_session();
  std::unique_ptr<Sequential> model = make_mlp();
  EXPECT_EQ(model->count_params(), 101770);
  const std::string s = model->summary();
  EXPECT_THAT(s, HasSubstr("Total params: 101,770"));
  EXPECT_THAT(s, HasSubstr("Trainable params: 101,770"));
  EXPECT_THAT(s, HasSubstr("Non-trainable params: 0"));
  const std::string dense = row_of(s, "dense (Dense)");
  EXPECT_THAT(dense, HasSubstr("(None, 128)")) << s;
  EXPECT_THAT(dense, HasSubstr("100480")) << s;
  const std::string dense_1 = row_of(s, "dense_1 (Dense)");
  EXPECT_THAT(dense_1, HasSubstr("(None, 10)")) << s;
  EXPECT_THAT(dense_1, HasSubstr("1290")) << s;
}

TEST(SequentialTest, ToConfigIsKerasShaped) {
  clear_session();
  std::unique_ptr<Sequential> model = make_mlp();
  const nlohmann::json c = model->to_config();
  EXPECT_EQ(c.at("class_name"), "Sequential");
  const nlohmann::json& layers = c.at("config").at("layers");
  ASSERT_EQ(layers.size(), 3u);
  EXPECT_EQ(layers[0].at("class_name"), "InputLayer");
  EXPECT_EQ(layers[0].at("config").at("batch_input_shape"), nlohmann::json::parse("[null, 784]"));
  const int units[] = {128, 10};
  const char* activations[] = {"relu", "softmax"};
  const char* names[] = {"dense", "dense_1"};
  for (int i = 0; i < 2; ++i) {
    const nlohmann::json& l = layers[static_cast<size_t>(i + 1)];
    EXPECT_EQ(l.at("class_name"), "Dense");
    const nlohmann::json& lc = l.at("config");
    EXPECT_EQ(lc.at("name"), names[i]);
    EXPECT_EQ(lc.at("units"), units[i]);
    EXPECT_EQ(lc.at("activation"), activations[i]);
    EXPECT_EQ(lc.at("use_bias"), true);
    EXPECT_EQ(lc.at("kernel_initializer").at("class_name"), "GlorotUniform");
    EXPECT_EQ(lc.at("bias_initializer").at("class_name"), "Zeros");
  }
}

TEST(SequentialTest, ParametersAreMirroredOnEveryCoreOfTheStrategy) {
  ReplicatedStrategy s(DeviceSpec::preset("v3-8"));
  std::unique_ptr<Sequential> model;
  {
    auto scope = s.scope();
    model = make_mlp();
  }
  EXPECT_EQ(&model->strategy(), &s);
  // (784 * 128 + 128 + 128 * 10 + 10) floats = 101,770 * 4 bytes.
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(s.ledger().core(c).stat(Category::parameters).current, 407080) << "core " << c;
    EXPECT_EQ(s.ledger().core(c).stat(Category::activations).current, 0) << "core " << c;
  }
}

TEST(SequentialTest, LazilyBuiltModelTrainsFromItsFirstStep) {
  // No input shape declared: the model is built inside the first train_step, by 8 replica threads
  // at once. Its weights must be created once, mirrored, and trained by that very step.
  clear_session();
  ReplicatedStrategy s(DeviceSpec::custom(8, 0));
  std::unique_ptr<Sequential> model;
  {
    auto scope = s.scope();
    model = std::make_unique<Sequential>(std::vector<LayerPtr>{Dense(5, "relu"), Dense(3, "softmax")});
  }
  EXPECT_FALSE(model->built());
  model->compile(std::make_shared<Adam>(), std::make_shared<CategoricalCrossentropy>());
  std::vector<float> x(16 * 4, 0.5f), y(16 * 3, 0.0f);
  for (int i = 0; i < 16; ++i) y[static_cast<size_t>(i * 3 + i % 3)] = 1.0f;
  const Batch batch{Tensor::from_vector({16, 4}, x), Tensor::from_vector({16, 3}, y)};
  const StepTotals t = model->train_step(batch);
  EXPECT_EQ(t.samples, 16);
  ASSERT_TRUE(model->built());
  EXPECT_EQ(model->input_shape(), (Shape{4}));
  ASSERT_EQ(model->variables().size(), 4u);
  const int64_t params = (4 * 5 + 5 + 5 * 3 + 3) * 4;
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(s.ledger().core(c).stat(Category::parameters).current, params) << "core " << c;
  }
  // The first step updated the weights: the output bias (initialised to zeros) has moved, and Adam
  // has its slots for every variable.
  float moved = 0;
  for (float b : model->variables()[3]->value().to_vector()) moved = std::max(moved, std::fabs(b));
  EXPECT_GT(moved, 0.0f) << model->variables()[3]->name() << " was not updated by the first step";
  EXPECT_EQ(model->optimizer().slot_variables().size(), 8u);
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(s.ledger().core(c).stat(Category::optimizer).current, 2 * params) << "core " << c;
  }
  EXPECT_NO_THROW(model->train_step(batch)) << "the second step must train the variables too";
}

// A linearly separable two-class problem: class 1 iff x0 + x1 > 0 (features 2 and 3 are noise).
void separable(int64_t n, uint64_t seed, Tensor& x, Tensor& y) {
  Rng rng(seed);
  std::vector<float> xv, yv;
  for (int64_t i = 0; i < n; ++i) {
    float row[4];
    for (float& v : row) v = 2.0f * rng.next_float() - 1.0f;
    const bool positive = row[0] + row[1] > 0;
    xv.insert(xv.end(), row, row + 4);
    yv.push_back(positive ? 0.0f : 1.0f);
    yv.push_back(positive ? 1.0f : 0.0f);
  }
  x = Tensor::from_vector({n, 4}, xv);
  y = Tensor::from_vector({n, 2}, yv);
}

TEST(SequentialTest, FitReducesTheLoss) {
  clear_session();
  set_random_seed(3);
  Tensor x, y;
  separable(128, 11, x, y);
  Sequential model({Dense(16, "relu", Shape{4}), Dense(2, "softmax")});
  Adam::Options o;
  o.learning_rate = 0.02f;
  model.compile(std::make_shared<Adam>(o), std::make_shared<CategoricalCrossentropy>());
  FitOptions fit;
  fit.epochs = 8;
  const History h = model.fit(Dataset::from_tensor_slices({x, y}).batch(16, /*drop_remainder=*/true), fit);
  ASSERT_EQ(h.epochs.size(), 8u);
  const double first = h.epochs.front().at("loss"), last = h.epochs.back().at("loss");
  EXPECT_TRUE(std::isfinite(last));
  EXPECT_LT(last, 0.6 * first) << "first epoch " << first << ", last " << last;
  EXPECT_GT(h.epochs.back().at("accuracy"), 0.9);
  EXPECT_EQ(model.optimizer().iterations(), 8 * 8);
  const Logs eval = model.evaluate(Dataset::from_tensor_slices({x, y}).batch(32));
  EXPECT_EQ(eval.at("samples"), 128);
  EXPECT_LT(eval.at("loss"), first);
}

TEST(SequentialTest, EightReplicaStepEqualsOneReplicaStep) {
  // The same global batch of 16, as 8 replicas x 2 rows (v3-8) and as 1 replica x 16 rows (cpu),
  // from the same initial weights: the mean of per-replica mean gradients is the global mean.
  clear_session();
  set_random_seed(5);
  ReplicatedStrategy v3(DeviceSpec::preset("v3-8"));
  std::unique_ptr<Sequential> replicated;
  {
    auto scope = v3.scope();
    replicated = make_mlp();
  }
  std::unique_ptr<Sequential> single = make_mlp();
  ASSERT_EQ(replicated->strategy().num_replicas(), 8);
  ASSERT_EQ(single->strategy().num_replicas(), 1);
  const std::vector<Variable*> a = replicated->variables(), b = single->variables();
  ASSERT_EQ(a.size(), b.size());
  std::vector<std::vector<float>> initial;
  for (size_t i = 0; i < a.size(); ++i) {
    b[i]->assign(a[i]->value());
    initial.push_back(a[i]->value().to_vector());
  }

  Rng rng(17);
  std::vector<float> xv(16 * 784), yv(16 * 10, 0.0f);
  for (float& v : xv) v = rng.next_float();
  for (int i = 0; i < 16; ++i) yv[static_cast<size_t>(i * 10 + static_cast<int>(rng.next_below(10)))] = 1.0f;
  const Batch batch{Tensor::from_vector({16, 784}, xv), Tensor::from_vector({16, 10}, yv)};

  for (Sequential* m : {replicated.get(), single.get()}) {
    SGD::Options o;
    o.learning_rate = 0.1f;
    o.momentum = 0.9f;
    m->compile(std::make_shared<SGD>(o), std::make_shared<CategoricalCrossentropy>());
  }
  for (int step = 0; step < 2; ++step) {
    const StepTotals ta = replicated->train_step(batch);
    const StepTotals tb = single->train_step(batch);
    EXPECT_EQ(ta.samples, 16);
    EXPECT_EQ(tb.samples, 16);
    EXPECT_NEAR(ta.loss_sum, tb.loss_sum, 1e-5 * std::fabs(tb.loss_sum)) << "step " << step;
    EXPECT_EQ(ta.correct, tb.correct);
  }
  for (size_t i = 0; i < a.size(); ++i) {
    const std::vector<float> va = a[i]->value().to_vector(), vb = b[i]->value().to_vector();
    int64_t bad = 0;
    size_t worst = 0;
    double worst_diff = -1;
    for (size_t j = 0; j < va.size(); ++j) {
      const double diff = std::fabs(static_cast<double>(va[j]) - vb[j]);
      if (diff > 1e-6 * std::fabs(vb[j]) + 1e-7) ++bad;
      if (diff > worst_diff) {
        worst_diff = diff;
        worst = j;
      }
    }
    EXPECT_EQ(bad, 0) << a[i]->name() << ": worst element " << worst << ": " << va[worst] << " vs " << vb[worst];
    // The steps changed every variable: the comparison is not between two untouched copies.
    double moved = 0;
    for (size_t j = 0; j < vb.size(); ++j) moved = std::max(moved, std::fabs(static_cast<double>(vb[j]) - initial[i][j]));
    EXPECT_GT(moved, 1e-4) << a[i]->name();
  }
  EXPECT_EQ(single->optimizer().iterations(), 2);
  EXPECT_EQ(replicated->optimizer().iterations(), 2);
}

}  // namespace
}  // namespace keel
