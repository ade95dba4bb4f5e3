// The seed's MLPs from the zoo: Keras layer names, weight shapes and parameter counts, flat and image
// inputs, and a forward pass that gives probabilities.
#include <cmath>
#include <ostream>
#include <utility>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/device/context.h"
#include "framework/layers/core_layers.h"
#include "framework/layers/layer.h"
#include "models/zoo.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

zoo::ModelOptions mlp_options(Shape input_shape, int64_t classes = 10) {
  zoo::ModelOptions o;
  o.input_shape = std::move(input_shape);
  o.classes = classes;
  return o;
}

struct Weight {
  std::string name;
  Shape shape;
  bool operator==(const Weight&) const = default;
};

std::vector<std::string> layer_names(const Model& m) {
  std::vector<std::string> out;
  for (const Layer* l : m.layers()) out.push_back(l->name() + " (" + l->class_name() + ")");
  return out;
}

std::vector<Weight> weights(const Model& m) {
  std::vector<Weight> out;
  for (const Variable* v : m.variables()) out.push_back({v->name(), v->shape()});
  return out;
}

void PrintTo(const Weight& w, std::ostream* os) { *os << w.name << " " << shape_string(w.shape); }

TEST(MlpTest, TheSeedsMlpOnFlatInputs) {
  clear_session();
  const auto m = zoo::build("mlp", {});
  EXPECT_EQ(m->class_name(), "Sequential");
  EXPECT_EQ(m->name(), "sequential");
  EXPECT_EQ(layer_names(*m), (std::vector<std::string>{"dense (Dense)", "dense_1 (Dense)"}));
  EXPECT_EQ(weights(*m), (std::vector<Weight>{{"dense/kernel", {784, 128}},
                                              {"dense/bias", {128}},
                                              {"dense_1/kernel", {128, 10}},
                                              {"dense_1/bias", {10}}}));
  EXPECT_EQ(m->count_params(), 784 * 128 + 128 + 128 * 10 + 10);
  EXPECT_EQ(m->count_params(), 101770);
  EXPECT_TRUE(m->non_trainable_variables().empty());
  const auto* hidden = dynamic_cast<const layers::Dense*>(m->layers()[0]);
  const auto* head = dynamic_cast<const layers::Dense*>(m->layers()[1]);
  ASSERT_NE(hidden, nullptr);
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(hidden->activation(), "relu");
  EXPECT_EQ(head->activation(), "softmax");
  EXPECT_EQ(m->layers()[0]->declared_input_shape(), Shape{784}) << "the input shape sits on the first Dense";
}

TEST(MlpTest, ClassesSetTheHead) {
  clear_session();
  const auto m = zoo::build("mlp", mlp_options({}, 3));
  EXPECT_EQ(m->output_shape(), (Shape{3}));
  EXPECT_EQ(weights(*m).back(), (Weight{"dense_1/bias", {3}}));
  EXPECT_EQ(m->count_params(), 784 * 128 + 128 + 128 * 3 + 3);
}

TEST(MlpTest, ImageInputsAreFlattenedFirst) {
  for (const Shape& in : {Shape{28, 28}, Shape{28, 28, 1}}) {
    clear_session();
    const auto m = zoo::build("mlp", mlp_options(in));
    EXPECT_EQ(layer_names(*m), (std::vector<std::string>{"flatten (Flatten)", "dense (Dense)", "dense_1 (Dense)"}))
        << shape_string(in);
    EXPECT_EQ(m->layers()[0]->declared_input_shape(), in);
    EXPECT_EQ(m->input_shape(), in);
    EXPECT_EQ(weights(*m)[0], (Weight{"dense/kernel", {784, 128}})) << shape_string(in);
    EXPECT_EQ(m->count_params(), 101770) << shape_string(in);
    EXPECT_EQ(m->output_shape(), (Shape{10}));
  }
}

TEST(MlpTest, OtherFlatSizesAndTheWideVariant) {
  clear_session();
  const auto small = zoo::build("mlp", mlp_options({20}));
  EXPECT_EQ(weights(*small)[0], (Weight{"dense/kernel", {20, 128}}));
  EXPECT_EQ(small->count_params(), 20 * 128 + 128 + 1290);
  clear_session();
  const auto wide = zoo::build("mlp-wide", mlp_options({32, 32, 3}));
  EXPECT_EQ(layer_names(*wide), (std::vector<std::string>{"flatten (Flatten)", "dense (Dense)", "dense_1 (Dense)"}));
  EXPECT_EQ(weights(*wide)[0], (Weight{"dense/kernel", {3072, 1024}}));
  EXPECT_EQ(weights(*wide)[2], (Weight{"dense_1/kernel", {1024, 10}}));
}

TEST(MlpTest, ForwardGivesOneProbabilityRowPerImage) {
  clear_session();
  const auto m = zoo::build("mlp", mlp_options({28, 28}));
  const Tensor x = testing::random_host({3, 28, 28}, 0, 1, 12);
  const Tensor p = (*m)(x);
  ASSERT_EQ(p.shape(), (Shape{3, 10}));
  const std::vector<float> v = p.to_vector();
  for (int r = 0; r < 3; ++r) {
    double sum = 0;
    for (int c = 0; c < 10; ++c) {
      const float q = v[static_cast<size_t>(r * 10 + c)];
      EXPECT_GT(q, 0.0f);
      EXPECT_LT(q, 1.0f);
      sum += q;
    }
    EXPECT_NEAR(sum, 1.0, 1e-5) << "row " << r;
  }
}

}  // namespace
}  // namespace keel
