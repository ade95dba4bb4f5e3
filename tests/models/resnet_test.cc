// The ResNet zoo: Keras's parameter counts, names and structure.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/device/strategy.h"
#include "framework/layers/layer.h"
#include "models/zoo.h"

namespace keel {
namespace {

// Built on abstract tensors: shapes and counts without the memory.
std::unique_ptr<Model> build(const std::string& name, Shape input, int64_t classes, ReplicatedStrategy& s) {
  clear_session();
  auto scope = s.scope();
  return zoo::build(name, {input, classes});
}

struct Counts {
  int64_t trainable = 0, non_trainable = 0;
};
Counts counts(const Model& m) {
  Counts c;
  for (Variable* v : m.variables()) (v->trainable() ? c.trainable : c.non_trainable) += num_elements(v->shape());
  return c;
}

TEST(ResNet, KerasParameterCounts) {
  ReplicatedStrategy s(DeviceSpec::preset("cpu"), {.abstract = true});
  auto r50 = build("resnet50", {224, 224, 3}, 1000, s);
  EXPECT_EQ(counts(*r50).trainable, 25583592);
  EXPECT_EQ(counts(*r50).non_trainable, 53120);
  EXPECT_EQ(build("resnet50", {224, 224, 3}, 10, s)->count_params(), 23608202);
  // keras.applications.ResNet101 / ResNet152 at 1000 classes.
  EXPECT_EQ(build("resnet101", {224, 224, 3}, 1000, s)->count_params(), 44707176);
  EXPECT_EQ(build("resnet152", {224, 224, 3}, 1000, s)->count_params(), 60419944);
}

TEST(ResNet, Resnet50NamesAndShapes) {
  ReplicatedStrategy s(DeviceSpec::preset("cpu"), {.abstract = true});
  auto m = build("resnet50", {224, 224, 3}, 1000, s);
  std::vector<std::string> names;
  for (Layer* l : m->layers()) names.push_back(l->name());
  ASSERT_EQ(names.size(), 177u);  // len(keras.applications.ResNet50().layers)
  EXPECT_EQ(names[0], "input_1");
  EXPECT_EQ(names[1], "conv1_pad");
  EXPECT_EQ(names[2], "conv1_conv");
  EXPECT_EQ(names[7], "conv2_block1_1_conv");
  EXPECT_EQ(names[13], "conv2_block1_0_conv");
  EXPECT_EQ(names[14], "conv2_block1_3_conv");
  EXPECT_EQ(names[15], "conv2_block1_0_bn");
  EXPECT_EQ(names[16], "conv2_block1_3_bn");
  EXPECT_EQ(names[175], "avg_pool");
  EXPECT_EQ(names[176], "predictions");
  EXPECT_EQ(m->output_shape(), Shape({1000}));
  // The stride of each later stage sits on its first 1x1 convolution, as in Keras (v1).
  const nlohmann::json cfg = m->to_config();
  for (const auto& layer : cfg["config"]["layers"]) {
    if (layer["name"] == "conv3_block1_1_conv") EXPECT_EQ(layer["config"]["strides"], nlohmann::json::parse("[2, 2]"));
    if (layer["name"] == "conv3_block1_2_conv") EXPECT_EQ(layer["config"]["strides"], nlohmann::json::parse("[1, 1]"));
    if (layer["name"] == "conv2_block1_1_bn") EXPECT_FLOAT_EQ(layer["config"]["epsilon"].get<float>(), 1.001e-5f);
  }
}

TEST(ResNet, SmallModelsAndBadInput) {
  ReplicatedStrategy s(DeviceSpec::preset("cpu"), {.abstract = true});
  // Basic-block ResNets at 32x32x1: conv1 (7*7*1*64+64) + BN, four stages, 512 -> 10 head.
  auto r18 = build("resnet18", {32, 32, 1}, 10, s);
  EXPECT_EQ(r18->output_shape(), Shape({10}));
  EXPECT_GT(r18->count_params(), 11000000);
  auto r34 = build("resnet34", {32, 32, 1}, 10, s);
  EXPECT_GT(r34->count_params(), r18->count_params());
  EXPECT_THROW(build("resnet50", {31, 32, 3}, 10, s), std::invalid_argument);
  EXPECT_THROW(build("resnet50", {224, 224, 3}, 0, s), std::invalid_argument);
  EXPECT_THROW(build("resnet50", {224, 224}, 10, s), std::invalid_argument);
}

}  // namespace
}  // namespace keel
