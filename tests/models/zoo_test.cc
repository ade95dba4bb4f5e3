// The model zoo: the registry by name, its defaults, and the names and options it refuses.
#include "models/zoo.h"

#include <stdexcept>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/device/strategy.h"
#include "framework/layers/layer.h"

namespace keel {
namespace {

using ::testing::HasSubstr;

zoo::ModelOptions options(Shape input_shape, int64_t classes = 10) {
  zoo::ModelOptions o;
  o.input_shape = std::move(input_shape);
  o.classes = classes;
  return o;
}

TEST(ZooTest, ListsEveryModelInOrderWithItsDefaultInput) {
  std::vector<std::string> names;
  for (const zoo::ZooEntry& e : zoo::models()) {
    names.push_back(e.name);
    EXPECT_FALSE(e.description.empty()) << e.name;
    EXPECT_TRUE(static_cast<bool>(e.build)) << e.name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"mlp", "mlp-wide", "resnet18", "resnet34", "resnet50", "resnet101",
                                             "resnet152"}));
  EXPECT_EQ(zoo::find("mlp").default_input_shape, (Shape{784}));
  EXPECT_EQ(zoo::find("mlp-wide").default_input_shape, (Shape{784}));
  EXPECT_EQ(zoo::find("resnet18").default_input_shape, (Shape{32, 32, 1}));
  EXPECT_EQ(zoo::find("resnet34").default_input_shape, (Shape{32, 32, 1}));
  for (const char* r : {"resnet50", "resnet101", "resnet152"}) {
    EXPECT_EQ(zoo::find(r).default_input_shape, (Shape{224, 224, 3})) << r;
  }
}

TEST(ZooTest, FindReturnsTheRegisteredEntry) {
  const zoo::ZooEntry& e = zoo::find("resnet50");
  EXPECT_EQ(e.name, "resnet50");
  EXPECT_EQ(&e, &zoo::models()[4]);
  EXPECT_THAT(e.description, HasSubstr("ResNet50"));
}

TEST(ZooTest, UnknownNamesAreRefusedWithTheKnownOnes) {
  for (const char* name : {"vgg16", "MLP", "resnet", "", "mlp "}) {
    try {
      zoo::find(name);
      ADD_FAILURE() << "found '" << name << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), HasSubstr("unknown model '" + std::string(name) + "'"));
      EXPECT_THAT(e.what(), HasSubstr("mlp, mlp-wide, resnet18, resnet34, resnet50, resnet101, resnet152"));
    }
    EXPECT_THROW(zoo::build(name, {}), std::invalid_argument) << name;
  }
}

TEST(ZooTest, BuildUsesTheDefaultInputAndClasses) {
  clear_session();
  const auto m = zoo::build("mlp", {});
  EXPECT_EQ(m->input_shape(), (Shape{784}));
  EXPECT_EQ(m->output_shape(), (Shape{10}));
  EXPECT_EQ(m->count_params(), 101770);
  const auto wide = zoo::build("mlp-wide", options({}, 5));
  EXPECT_EQ(wide->output_shape(), (Shape{5}));
  // 784*1024 + 1024 + 1024*5 + 5.
  EXPECT_EQ(wide->count_params(), 802816 + 1024 + 5120 + 5);
}

TEST(ZooTest, BadClassesAndInputShapesAreRefused) {
  for (int64_t classes : {0, -1}) {
    EXPECT_THROW(zoo::build("mlp", options({}, classes)), std::invalid_argument) << classes;
  }
  EXPECT_THROW(zoo::build("mlp", options({0})), std::invalid_argument);
  EXPECT_THROW(zoo::build("mlp", options({28, -28})), std::invalid_argument);
  // keel's limits (framework/core/limits.h), checked before any layer exists.
  for (int64_t classes : {(int64_t{1} << 24) + 1, int64_t{100000000}, int64_t{1} << 62}) {
    try {
      zoo::build("mlp", options({}, classes));
      ADD_FAILURE() << classes << " classes were accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), HasSubstr("2^24 (16777216)"));
    }
  }
  EXPECT_THROW(zoo::build("resnet18", options({100000, 100000, 3})), std::invalid_argument);
  EXPECT_THROW(zoo::build("resnet18", options({65536, 65536, 1})), std::invalid_argument) << "2^32 elements per example";
}

TEST(ZooTest, AnUnknownNameIsQuotedShort) {
  try {
    zoo::find(std::string(1 << 20, 'x') + "\n");
    ADD_FAILURE() << "found";
  } catch (const std::invalid_argument& e) {
    EXPECT_LT(std::string(e.what()).size(), 512u);
    EXPECT_THAT(e.what(), HasSubstr("... (1048577 bytes)"));
  }
}

TEST(ZooTest, ResNetsWithoutTopPoolAsKerasApplicationsDo) {
  for (const char* pooling : {"avg", "max"}) {
    clear_session();
    zoo::ModelOptions options;
    options.include_top = false;
    options.pooling = pooling;
    const std::unique_ptr<Model> m = zoo::build("resnet18", options);
    EXPECT_EQ(m->layers().back()->name(), std::string(pooling) + "_pool");
    EXPECT_EQ(m->layers().back()->compute_output_shape({1, 1, 512}), (Shape{512}));
  }
  clear_session();
  zoo::ModelOptions bad;
  bad.include_top = false;
  bad.pooling = "sum";
  EXPECT_THROW(zoo::build("resnet18", bad), std::invalid_argument);
}

TEST(ZooTest, ModelsAreBuiltInTheCurrentScope) {
  clear_session();
  ReplicatedStrategy s(DeviceSpec::custom(2, 0), ReplicatedStrategy::Options{.abstract = true, .host_threads = 0});
  std::unique_ptr<Model> m;
  {
    auto scope = s.scope();
    m = zoo::build("resnet18", {});
  }
  EXPECT_EQ(&m->strategy(), &s);
  EXPECT_EQ(m->input_shape(), (Shape{32, 32, 1}));
  EXPECT_EQ(m->output_shape(), (Shape{10}));
  int64_t bytes = 0;
  for (Variable* v : m->variables()) bytes += num_elements(v->shape()) * 4;
  for (int c = 0; c < 2; ++c) EXPECT_EQ(s.ledger().core(c).stat(Category::parameters).current, bytes) << "core " << c;
}

}  // namespace
}  // namespace keel
