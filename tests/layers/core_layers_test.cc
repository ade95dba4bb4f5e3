// Keras's core layers: Dense, Activation, Flatten, Dropout — names, weights, shapes, values, configs
// and the arguments they refuse.
#include "framework/layers/core_layers.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/device/context.h"
#include "framework/device/strategy.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using testing::host;

void expect_core_near_all(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-6f) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

// Dense(2) on 3 features with kernel [[1, 0], [0, 1], [1, 1]] and the given bias.
std::shared_ptr<layers::Dense> known_dense(const std::string& activation, std::vector<float> bias) {
  auto d = Dense(2, activation);
  d->build({3});
  d->weights()[0]->assign(host({3, 2}, {1, 0, 0, 1, 1, 1}));
  d->weights()[1]->assign(host({2}, std::move(bias)));
  return d;
}

TEST(DenseTest, WeightsHaveKerasNamesShapesAndInitialValues) {
  HostScope scope;
  clear_session();
  auto d = Dense(16);
  EXPECT_EQ(d->name(), "dense");
  EXPECT_EQ(d->class_name(), "Dense");
  EXPECT_EQ(d->units(), 16);
  EXPECT_EQ(d->activation(), "linear") << "Keras's default activation";
  d->build({8});
  ASSERT_EQ(d->weights().size(), 2u);
  EXPECT_EQ(d->weights()[0]->name(), "dense/kernel");
  EXPECT_EQ(d->weights()[0]->shape(), (Shape{8, 16})) << "Keras layout (in, out)";
  EXPECT_EQ(d->weights()[1]->name(), "dense/bias");
  EXPECT_EQ(d->weights()[1]->shape(), (Shape{16}));
  EXPECT_EQ(d->count_params(), 8 * 16 + 16);
  for (float b : d->weights()[1]->value().to_vector()) EXPECT_EQ(b, 0.0f) << "zero biases";
  const float limit = std::sqrt(6.0f / (8 + 16));  // glorot_uniform
  float largest = 0;
  for (float k : d->weights()[0]->value().to_vector()) largest = std::max(largest, std::fabs(k));
  EXPECT_LE(largest, limit);
  EXPECT_GT(largest, 0.8f * limit);
  EXPECT_EQ(Dense(4)->name(), "dense_1");
}

TEST(DenseTest, OptionsWithoutBiasAndOtherInitializers) {
  HostScope scope;
  layers::Dense::Options o;
  o.use_bias = false;
  o.kernel_initializer = "ones";
  o.name = "head";
  auto d = Dense(3, o);
  d->build({2});
  EXPECT_EQ(d->name(), "head");
  ASSERT_EQ(d->weights().size(), 1u);
  EXPECT_EQ(d->weights()[0]->name(), "head/kernel");
  EXPECT_EQ(d->count_params(), 6);
  const Tensor y = (*d)(host({1, 2}, {2, 5}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{7, 7, 7}));
  const nlohmann::json c = d->get_config();
  EXPECT_EQ(c.at("use_bias"), false);
  EXPECT_EQ(c.at("kernel_initializer").at("class_name"), "Ones");
}

TEST(DenseTest, ForwardIsXTimesKernelPlusBias) {
  HostScope scope;
  auto d = known_dense("linear", {0.5f, -1.0f});
  const Tensor x = host({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor y = (*d)(x);
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  // [1+3, 2+3] + [0.5, -1] and [4+6, 5+6] + [0.5, -1].
  expect_core_near_all(y.to_vector(), {4.5f, 4.0f, 10.5f, 10.0f});
}

TEST(DenseTest, ActsOnTheLastAxisOfHigherRankInputs) {
  HostScope scope;
  auto d = known_dense("linear", {0.5f, -1.0f});
  EXPECT_EQ(d->compute_output_shape({5, 3}), (Shape{5, 2}));
  const Tensor y = (*d)(host({1, 2, 3}, {1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(y.shape(), (Shape{1, 2, 2}));
  expect_core_near_all(y.to_vector(), {4.5f, 4.0f, 10.5f, 10.0f});
}

TEST(DenseTest, ReluAndSoftmaxActivations) {
  HostScope scope;
  auto r = known_dense("relu", {-5.0f, -20.0f});
  // Pre-activations [-1, -15] and [5, -9].
  expect_core_near_all((*r)(host({2, 3}, {1, 2, 3, 4, 5, 6})).to_vector(), {0, 0, 5, 0});

  auto s = Dense(2, "softmax");
  s->build({1});
  s->weights()[0]->assign(host({1, 2}, {0, 0}));
  s->weights()[1]->assign(host({2}, {std::log(3.0f), 0.0f}));
  const Tensor p = (*s)(host({2, 1}, {7, -3}));
  expect_core_near_all(p.to_vector(), {0.75f, 0.25f, 0.75f, 0.25f});
  ASSERT_TRUE(p.keras_logits().defined()) << "softmax outputs remember their logits for the fused loss";
  expect_core_near_all(p.keras_logits().to_vector(), {std::log(3.0f), 0, std::log(3.0f), 0});
}

TEST(DenseTest, GetConfigIsKeras) {
  clear_session();
  auto d = Dense(128, "relu", Shape{784});
  EXPECT_EQ(d->get_config(), nlohmann::json::parse(R"({
    "name": "dense", "trainable": true, "dtype": "float32", "batch_input_shape": [null, 784],
    "units": 128, "activation": "relu", "use_bias": true,
    "kernel_initializer": {"class_name": "GlorotUniform", "config": {"seed": null}},
    "bias_initializer": {"class_name": "Zeros", "config": {}},
    "kernel_regularizer": null, "bias_regularizer": null, "activity_regularizer": null,
    "kernel_constraint": null, "bias_constraint": null})"));
  EXPECT_FALSE(Dense(3)->get_config().contains("batch_input_shape"));
}

TEST(DenseTest, BadArgumentsAreRefused) {
  HostScope scope;
  EXPECT_THROW(Dense(0), std::invalid_argument);
  EXPECT_THROW(Dense(-3), std::invalid_argument);
  EXPECT_THROW(Dense(int64_t{1} << 24 | 1), std::invalid_argument) << "units past keel's limit, 2^24";
  EXPECT_THROW(Dense(int64_t{1} << 62), std::invalid_argument);
  EXPECT_THROW(Dense(4, "tanh"), std::invalid_argument);
  EXPECT_THROW(Dense(4, "Relu"), std::invalid_argument);
  auto d = Dense(4);
  EXPECT_THROW(d->compute_output_shape({}), std::invalid_argument);
  EXPECT_THROW(d->build({}), std::invalid_argument);
  auto e = Dense(4);
  e->build({3});
  EXPECT_THROW((*e)(host({2, 5}, std::vector<float>(10, 1.0f))), std::invalid_argument)
      << "inputs whose last axis differs from the kernel's";
}

TEST(ActivationTest, AppliesTheNamedFunction) {
  HostScope scope;
  clear_session();
  auto relu = Activation("relu");
  EXPECT_EQ(relu->name(), "activation");
  EXPECT_EQ(relu->class_name(), "Activation");
  EXPECT_EQ((*relu)(host({1, 4}, {-1, 0, 2, -0.5f})).to_vector(), (std::vector<float>{0, 0, 2, 0}));
  EXPECT_TRUE(relu->weights().empty());
  EXPECT_EQ(relu->compute_output_shape({3, 4}), (Shape{3, 4}));

  auto softmax = Activation("softmax");
  EXPECT_EQ(softmax->name(), "activation_1");
  const float e = std::exp(1.0f);
  expect_core_near_all((*softmax)(host({1, 2}, {1, 0})).to_vector(), {e / (e + 1), 1 / (e + 1)});

  const Tensor x = host({2}, {-1, 1});
  const Tensor same = (*Activation("linear"))(x);
  EXPECT_EQ(same.to_vector(), x.to_vector());
}

TEST(ActivationTest, ConfigAndUnknownNames) {
  clear_session();
  EXPECT_EQ(Activation("relu")->get_config(), nlohmann::json::parse(
      R"({"name": "activation", "trainable": true, "dtype": "float32", "activation": "relu"})"));
  EXPECT_THROW(Activation("gelu"), std::invalid_argument);
  EXPECT_THROW(Activation(""), std::invalid_argument);
  EXPECT_THROW(layers::check_activation("sigmoid"), std::invalid_argument);
  EXPECT_NO_THROW(layers::check_activation("softmax"));
}

TEST(FlattenTest, KeepsTheBatchAndFlattensTheRestInOrder) {
  HostScope scope;
  clear_session();
  auto f = Flatten();
  EXPECT_EQ(f->name(), "flatten");
  EXPECT_EQ(f->compute_output_shape({3, 4}), (Shape{12}));
  EXPECT_EQ(f->compute_output_shape({28, 28, 1}), (Shape{784}));
  std::vector<float> v(24);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  const Tensor y = (*f)(host({2, 3, 4}, v));
  EXPECT_EQ(y.shape(), (Shape{2, 12}));
  EXPECT_EQ(y.to_vector(), v);
  EXPECT_EQ((*Flatten())(host({2, 3}, {1, 2, 3, 4, 5, 6})).shape(), (Shape{2, 3}));
  EXPECT_TRUE(f->weights().empty());
}

TEST(FlattenTest, Config) {
  clear_session();
  EXPECT_EQ(Flatten()->get_config(), nlohmann::json::parse(
      R"({"name": "flatten", "trainable": true, "dtype": "float32", "data_format": "channels_last"})"));
  auto f = Flatten(Shape{28, 28});
  EXPECT_EQ(f->get_config().at("batch_input_shape"), nlohmann::json::parse("[null, 28, 28]"));
  ASSERT_TRUE(f->declared_input_shape().has_value());
  EXPECT_EQ(*f->declared_input_shape(), (Shape{28, 28}));
}

TEST(DropoutTest, InferenceAndRateZeroPassInputsThrough) {
  HostScope scope;
  const Tensor x = testing::random_host({4, 5}, -1, 1, 3);
  auto d = Dropout(0.5f, 7);
  EXPECT_EQ((*d)(x, /*training=*/false).to_vector(), x.to_vector());
  EXPECT_EQ((*Dropout(0.0f, 7))(x, /*training=*/true).to_vector(), x.to_vector());
  EXPECT_TRUE(d->weights().empty());
}

TEST(DropoutTest, TrainingZeroesAboutRateAndScalesTheRest) {
  HostScope scope;
  const float rate = 0.25f;
  auto d = Dropout(rate, 11);
  const Tensor x = Tensor::full({4000}, 2.0f);
  const std::vector<float> y = (*d)(x, /*training=*/true).to_vector();
  int zeros = 0;
  for (float v : y) {
    if (v == 0.0f) {
      ++zeros;
    } else {
      EXPECT_FLOAT_EQ(v, 2.0f / (1.0f - rate));
    }
  }
  EXPECT_NEAR(zeros / 4000.0, rate, 0.03);
}

TEST(DropoutTest, MasksAreAFunctionOfSeedStepAndReplica) {
  HostScope host_scope;
  const Tensor x = Tensor::full({256}, 1.0f);
  auto a = Dropout(0.5f, 5);
  auto b = Dropout(0.5f, 5);
  auto c = Dropout(0.5f, 6);
  const std::vector<float> ya = (*a)(x, true).to_vector();
  EXPECT_EQ((*a)(x, true).to_vector(), ya) << "outside a run: always step 0, replica 0";
  EXPECT_EQ((*b)(x, true).to_vector(), ya) << "the same seed draws the same mask";
  EXPECT_NE((*c)(x, true).to_vector(), ya);

  // Inside strategy.run the step and the replica key the mask; step 0 of replica 0 is the mask
  // drawn outside a run.
  ReplicatedStrategy s(DeviceSpec::custom(2, 0));
  std::vector<Batch> shards(2);
  auto masks = [&] {
    return s.run([&](const Batch&) { return (*a)(x, true).to_vector(); }, shards);
  };
  const std::vector<std::vector<float>> step0 = masks();
  const std::vector<std::vector<float>> step1 = masks();
  EXPECT_EQ(step0[0], ya);
  EXPECT_NE(step0[1], ya) << "each replica draws its own mask";
  EXPECT_NE(step1[0], ya) << "each step draws a new mask";
  EXPECT_NE(step1[1], step0[1]);
}

TEST(DropoutTest, ConfigAndBadRates) {
  clear_session();
  EXPECT_EQ(Dropout(0.5f, 7)->get_config(), nlohmann::json::parse(
      R"({"name": "dropout", "trainable": true, "dtype": "float32", "rate": 0.5, "noise_shape": null, "seed": 7})"));
  EXPECT_EQ(Dropout(0.25f)->get_config().at("seed"), nullptr);
  EXPECT_EQ(Dropout(0.25f)->class_name(), "Dropout");
  EXPECT_THROW(Dropout(1.0f), std::invalid_argument);
  EXPECT_THROW(Dropout(-0.1f), std::invalid_argument);
  EXPECT_THROW(Dropout(std::nanf("")), std::invalid_argument);
}

}  // namespace
}  // namespace keel
