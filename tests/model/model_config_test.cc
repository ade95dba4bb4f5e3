// Keras model configs read back (framework/model/model_config.h): every zoo model's own config passes;
// sizes past keel's limits, unknown classes, wrong types, deep nesting and huge texts are refused with
// a short message naming the layer, the field and the limit.
#include "framework/model/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "framework/core/limits.h"
#include "framework/device/strategy.h"
#include "framework/layers/layer.h"
#include "models/zoo.h"

namespace keel {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

json zoo_config(const std::string& name, Shape input = {}) {
  clear_session();
  ReplicatedStrategy strategy(DeviceSpec::preset("cpu"), ReplicatedStrategy::Options{/*abstract=*/true, 0});
  auto scope = strategy.scope();
  zoo::ModelOptions options;
  options.input_shape = std::move(input);
  return zoo::build(name, options)->to_config();
}

std::string refusal(const json& config) {
  try {
    check_model_config(config);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

std::string text_refusal(const std::string& text) {
  try {
    parse_model_config(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfigTest, EveryZooModelsConfigPasses) {
  for (const zoo::ZooEntry& e : zoo::models()) {
    const json config = zoo_config(e.name, e.name.rfind("resnet", 0) == 0 ? Shape{32, 32, 3} : Shape{});
    EXPECT_EQ(refusal(config), "") << e.name;
    EXPECT_EQ(parse_model_config(config.dump()), config) << e.name;
    EXPECT_LT(config.dump().size(), kMaxConfigBytes) << e.name;
  }
}

TEST(ModelConfigTest, SizesPastTheLimitsAreRefused) {
  const json mlp = zoo_config("mlp");
  const json resnet = zoo_config("resnet18");
  auto layer_of = [](const json& config, const std::string& class_name) {
    for (size_t i = 0; i < config["config"]["layers"].size(); ++i) {
      if (config["config"]["layers"][i]["class_name"] == class_name) return i;
    }
    return size_t{0};
  };
  struct Case {
    json config;
    std::string layer_class, key;
    json value;
    std::string expect;
  };
  const Case cases[] = {
      {mlp, "Dense", "units", 1000000000, "units must be between 1 and 2^24 (16777216), got 1000000000"},
      {mlp, "Dense", "units", 0, "units must be between 1"},
      {mlp, "Dense", "units", 10.5, "units must be an integer"},
      {mlp, "Dense", "units", "128", "units must be an integer"},
      {mlp, "Dense", "units", std::numeric_limits<uint64_t>::max(), "past 2^63"},
      {mlp, "InputLayer", "batch_input_shape", json::array({nullptr, 100000}), "2^16"},
      {mlp, "InputLayer", "batch_input_shape", json::array({784}), "[null, d1, ..., dk]"},
      {resnet, "Conv2D", "filters", int64_t{1} << 40, "filters must be between 1 and 2^24"},
      {resnet, "Conv2D", "kernel_size", json::array({3, 100000}), "kernel_size must be between 1 and 2^12"},
      {resnet, "Conv2D", "strides", json::array({0, 1}), "strides"},
      {resnet, "ZeroPadding2D", "padding", json::array({json::array({3, -1}), json::array({3, 3})}), "padding"},
      {resnet, "MaxPooling2D", "pool_size", json::array({1 << 20, 3}), "pool_size"},
      {resnet, "BatchNormalization", "axis", 99, "axis"},
      {mlp, "Dense", "name", std::string(1000, 'n'), "name must have 1 to 256 bytes"},
  };
  for (const Case& c : cases) {
    json config = c.config;
    config["config"]["layers"][layer_of(config, c.layer_class)]["config"][c.key] = c.value;
    const std::string message = refusal(config);
    EXPECT_THAT(message, HasSubstr(c.expect)) << c.layer_class << " " << c.key;
    EXPECT_THAT(message, HasSubstr("(" + c.layer_class + ")")) << message;
    EXPECT_LT(message.size(), 1024u) << message;
  }
}

TEST(ModelConfigTest, StructureAndClassesAreChecked) {
  const json mlp = zoo_config("mlp");
  json unknown = mlp;
  unknown["config"]["layers"][1]["class_name"] = std::string(1 << 20, 'L');
  EXPECT_THAT(refusal(unknown), HasSubstr("unknown layer class"));
  EXPECT_LT(refusal(unknown).size(), 1024u);
  json lambda = mlp;
  lambda["config"]["layers"][1]["class_name"] = "Lambda";
  EXPECT_THAT(refusal(lambda), HasSubstr("unknown layer class 'Lambda'"));
  json no_layers = mlp;
  no_layers["config"]["layers"] = json::array();
  EXPECT_THAT(refusal(no_layers), HasSubstr("1 to 100000 layers"));
  EXPECT_THAT(refusal(json{{"class_name", "Model"}, {"config", json::object()}}), HasSubstr("Sequential or Functional"));
  EXPECT_THAT(refusal(json::array()), HasSubstr("top level"));
  json rate = zoo_config("mlp");
  rate["config"]["layers"][1]["class_name"] = "Dropout";
  rate["config"]["layers"][1]["config"]["rate"] = 1.5;
  EXPECT_THAT(refusal(rate), HasSubstr("rate must be in [0, 1)"));
}

TEST(ModelConfigTest, HugeAndDeepTextsAreRefusedBeforeParsing) {
  EXPECT_THAT(text_refusal(std::string(kMaxConfigBytes + 1, ' ')), HasSubstr("2^24"));
  EXPECT_THAT(text_refusal(std::string(100000, '[') + std::string(100000, ']')), HasSubstr("nested deeper"));
  EXPECT_THAT(text_refusal("{\"class_name\": \"Sequential\", \"config\": {\"name\": \"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"}}"),
              HasSubstr("layers")) << "brackets inside strings do not count";
  EXPECT_THAT(text_refusal("{\"class_name\": "), HasSubstr("not valid JSON"));
}

TEST(ModelConfigTest, FirstDifferenceIsAJsonPointer) {
  const json a = zoo_config("mlp");
  EXPECT_EQ(first_config_difference(a, a), "");
  json b = a;
  b["config"]["layers"][2]["config"]["units"] = 11;
  EXPECT_EQ(first_config_difference(b, a), "/config/layers/2/config/units");
  EXPECT_FALSE(first_config_difference(json::array(), a).empty());
}

}  // namespace
}  // namespace keel
