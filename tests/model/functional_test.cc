// The functional API: graphs of layers on symbolic tensors, executed without recursion, Keras order.
#include <gmock/gmock.h>
#include <cstring>
#include <gtest/gtest.h>

#include "framework/autodiff/tape.h"
#include "framework/core/random.h"
#include "framework/device/context.h"
#include "framework/layers/conv_layers.h"
#include "framework/layers/normalization.h"
#include "framework/layers/core_layers.h"
#include "framework/layers/dtype_policy.h"
#include "framework/layers/initializers.h"
#include "framework/model/functional.h"
#include "framework/ops/ops.h"
#include "models/zoo.h"

namespace keel {
namespace {

using ::testing::HasSubstr;

TEST(Functional, DiamondGraphMatchesTheSameOpsByHand) {
  clear_session();
  set_random_seed(5);
  HostScope host;
  KerasTensor in = Input({6});
  auto d1 = Dense(4, "relu");
  auto d2 = Dense(4);
  auto out_layer = Dense(3, "softmax");
  KerasTensor a = (*d1)(in);
  KerasTensor b = (*d2)(in);
  KerasTensor s = (*Add())({a, b});
  KerasTensor out = (*out_layer)(s);
  Functional model(in, out, "diamond");
  EXPECT_EQ(model.output_shape(), Shape({3}));
  EXPECT_EQ(model.count_params(), (6 * 4 + 4) * 2 + 4 * 3 + 3);

  Tensor x = Tensor::full({2, 6}, 0.5f);
  x.data()[3] = -1.0f;
  Tensor y = model(x);
  // The same computation by hand.
  Tensor ha = (*d1)(x), hb = (*d2)(x);
  Tensor expect = (*out_layer)(ops::add(ha, hb));
  ASSERT_EQ(y.shape(), expect.shape());
  for (int64_t i = 0; i < y.size(); ++i) EXPECT_FLOAT_EQ(y.data()[i], expect.data()[i]);

  // Gradients flow through both branches.
  GradientTape tape;
  Tensor loss = ops::reduce_sum(model(x, true));
  auto vars = model.trainable_variables();
  auto grads = tape.gradient(loss, vars);
  for (size_t i = 0; i < grads.size(); ++i) EXPECT_TRUE(grads[i].defined()) << vars[i]->name();
}

TEST(Functional, KerasLayerOrderIsByDepthThenWalkOrder) {
  clear_session();
  HostScope host;
  // A residual block shaped like ResNet's: the shortcut is created first but listed after the
  // deeper main branch, as keras.applications.ResNet50's model.layers are.
  KerasTensor in = Input({8, 8, 4}, "input_1");
  KerasTensor shortcut = (*Conv2D(8, 1, {.name = "b_0_conv"}))(in);
  KerasTensor x = (*Conv2D(8, 1, {.name = "b_1_conv"}))(in);
  x = (*std::make_shared<layers::Activation>("relu", "b_1_relu"))(x);
  x = (*Conv2D(8, 3, {.padding = "same", .name = "b_2_conv"}))(x);
  x = (*Add("b_add"))({shortcut, x});
  Functional model(in, x);
  std::vector<std::string> names;
  for (Layer* l : model.layers()) names.push_back(l->name());
  EXPECT_EQ(names, (std::vector<std::string>{"input_1", "b_1_conv", "b_1_relu", "b_0_conv", "b_2_conv", "b_add"}));
  const nlohmann::json cfg = model.to_config();
  EXPECT_EQ(cfg["class_name"], "Functional");
  EXPECT_EQ(cfg["config"]["input_layers"], nlohmann::json::parse(R"([["input_1", 0, 0]])"));
  EXPECT_EQ(cfg["config"]["output_layers"], nlohmann::json::parse(R"([["b_add", 0, 0]])"));
  const auto& add = cfg["config"]["layers"][5];
  EXPECT_EQ(add["name"], "b_add");
  EXPECT_EQ(add["inbound_nodes"], nlohmann::json::parse(R"([[["b_0_conv", 0, 0, {}], ["b_2_conv", 0, 0, {}]]])"));
  const std::string summary = model.summary();
  EXPECT_THAT(summary, HasSubstr("Connected to"));
  // Keras wraps a long "Connected to" cell after each "',".
  EXPECT_THAT(summary, HasSubstr("['b_0_conv[0][0]',"));
  EXPECT_THAT(summary, HasSubstr("'b_2_conv[0][0]']"));
}

TEST(Functional, SharedLayerAndErrors) {
  clear_session();
  HostScope host;
  KerasTensor in = Input({5});
  auto shared = Dense(5, "relu");
  KerasTensor y = (*shared)((*shared)(in));  // the same weights twice
  Functional model(in, y);
  EXPECT_EQ(model.count_params(), 30);
  EXPECT_EQ(shared->num_inbound_nodes(), 2);
  EXPECT_EQ(model(Tensor::full({3, 5}, 1.0f)).shape(), Shape({3, 5}));
  EXPECT_THROW(model(Tensor::full({3, 4}, 1.0f)), std::invalid_argument);
  KerasTensor other = Input({5});
  EXPECT_THROW(Functional(in, (*Add())({in, other})), std::invalid_argument);  // disconnected
  EXPECT_THROW((*Add())({in, Input({4})}), std::invalid_argument);            // shapes differ
}

TEST(Functional, DeepChainNeedsNoRecursion) {
  clear_session();
  HostScope host;
  KerasTensor in = Input({2});
  KerasTensor x = in;
  for (int i = 0; i < 20000; ++i) x = (*std::make_shared<layers::Activation>("linear", "a" + std::to_string(i)))(x);
  Functional model(in, x);
  EXPECT_EQ(model.layers().size(), 20001u);
  Tensor y = model(Tensor::full({1, 2}, 3.0f));
  EXPECT_EQ(y.data()[1], 3.0f);
}

// A BatchNormalization whose output only a ReLU reads runs with it as one op, and one read by an Add
// read by a ReLU with both: the same output, gradients and moving statistics as layer by layer, in
// float32 and in mixed bfloat16, and fewer ops recorded. In ResNet18's downsampling blocks both of
// the Add's inputs come from a BatchNormalization: the main path's fuses, the shortcut's runs alone.
struct Step {
  std::vector<std::vector<float>> values;  // output, gradients, then every variable after the step
  size_t recorded_ops = 0;
};
Step resnet18_step(bool fuse, const std::string& policy) {
  clear_session();
  mixed_precision::set_global_policy(policy);
  set_random_seed(6);
  std::unique_ptr<Model> model = zoo::build("resnet18", {{32, 32, 1}, 10});
  mixed_precision::set_global_policy("float32");
  dynamic_cast<Functional&>(*model).set_fuse_batch_norm_relu(fuse);
  Tensor x = Tensor::empty({3, 32, 32, 1});
  Rng rng(9);
  for (int64_t i = 0; i < x.size(); ++i) x.data()[i] = rng.next_float() - 0.5f;
  Step step;
  GradientTape tape;
  const Tensor y = model->call(x, /*training=*/true);
  step.recorded_ops = tape.num_recorded_ops();
  step.values.push_back(y.to_vector());
  const Tensor loss = ops::reduce_sum(ops::matmul(ops::reshape(y, {1, y.size()}), Tensor::full({y.size(), 1}, 0.5f)));
  for (const Tensor& g : tape.gradient(loss, model->trainable_variables())) step.values.push_back(g.to_vector());
  for (Variable* v : model->variables()) step.values.push_back(v->value().to_vector());
  return step;
}

TEST(Functional, BatchNormReluPairsRunAsOneOpWithTheSameBits) {
  for (const std::string policy : {"float32", "mixed_bfloat16"}) {
    const Step apart = resnet18_step(false, policy), fused = resnet18_step(true, policy);
    // ResNet18 has 9 BatchNormalization + ReLU pairs (the stem's and the first of each of its 8
    // blocks: one op fewer each) and 8 BatchNormalization + Add + ReLU ends of blocks (two fewer).
    EXPECT_EQ(apart.recorded_ops - fused.recorded_ops, 9u + 2u * 8u) << policy;
    ASSERT_EQ(apart.values.size(), fused.values.size());
    for (size_t i = 0; i < apart.values.size(); ++i) {
      const std::vector<float>& a = apart.values[i];
      const std::vector<float>& b = fused.values[i];
      ASSERT_EQ(a.size(), b.size()) << policy << " value " << i;
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << policy << " value " << i;
    }
  }
}

// Where the Add's other input is not in the BatchNormalization's compute dtype (here a float32
// model input beside mixed_bfloat16 layers), the layers run one after the other: the same bits as
// with fusion off. And a BatchNormalization read by two layers runs on its own.
std::vector<std::vector<float>> mixed_residual_step(bool fuse) {
  clear_session();
  mixed_precision::set_global_policy("mixed_bfloat16");
  set_random_seed(7);
  layers::Conv2D::Options same;
  same.padding = "same";
  KerasTensor in = Input({6, 6, 4});
  KerasTensor c = (*Conv2D(4, 3, same))(in);
  KerasTensor b = (*BatchNormalization())(c);
  KerasTensor r = (*std::make_shared<layers::Activation>("relu"))((*Add())({in, b}));  // residual: float32
  KerasTensor b2 = (*BatchNormalization())((*Conv2D(4, 3, same))(r));
  KerasTensor twice = (*Add())({(*std::make_shared<layers::Activation>("relu"))(b2), b2});  // b2 read twice
  KerasTensor out = (*Dense(3))((*std::make_shared<layers::Flatten>())(twice));
  mixed_precision::set_global_policy("float32");
  Functional model(in, out);
  model.set_fuse_batch_norm_relu(fuse);
  Tensor x = Tensor::empty({2, 6, 6, 4});
  Rng rng(3);
  for (int64_t i = 0; i < x.size(); ++i) x.data()[i] = rng.next_float() - 0.5f;
  GradientTape tape;
  const Tensor y = model.call(x, /*training=*/true);
  std::vector<std::vector<float>> values = {y.to_vector()};
  for (const Tensor& g : tape.gradient(ops::reduce_sum(y), model.trainable_variables())) values.push_back(g.to_vector());
  return values;
}

TEST(Functional, FusionFallsBackWhereTheResidualIsInAnotherDtype) {
  const auto apart = mixed_residual_step(false), fused = mixed_residual_step(true);
  ASSERT_EQ(apart.size(), fused.size());
  for (size_t i = 0; i < apart.size(); ++i) {
    ASSERT_EQ(apart[i].size(), fused[i].size());
    EXPECT_EQ(std::memcmp(apart[i].data(), fused[i].data(), apart[i].size() * sizeof(float)), 0) << "value " << i;
  }
}

}  // namespace
}  // namespace keel
