// Remat modes by name, and what `segments` does to a model's forward pass: the same output, far
// fewer ops recorded (one per segment, then the head's own), and the same gradients.
#include "framework/model/remat.h"

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/autodiff/tape.h"
#include "framework/core/random.h"
#include "framework/layers/initializers.h"
#include "framework/train/losses.h"
#include "models/zoo.h"

namespace keel {
namespace {

TEST(RematTest, NamesRoundTripAndOtherModesAreRefused) {
  EXPECT_EQ(parse_remat("none"), Remat::none);
  EXPECT_EQ(parse_remat("segments"), Remat::segments);
  EXPECT_STREQ(remat_name(Remat::segments), "segments");
  for (const std::string later : {"full", "larger_than:1024", "layers:conv.*"}) {
    try {
      parse_remat(later);
      FAIL() << later;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("not implemented yet"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(parse_remat("Segments"), std::invalid_argument);
  EXPECT_THROW(parse_remat(""), std::invalid_argument);
}

struct Pass {
  std::vector<float> output;
  size_t recorded_ops = 0;
  std::vector<std::vector<float>> gradients;
};

Pass forward_and_backward(const std::string& name, const Shape& input, Remat remat) {
  clear_session();
  set_random_seed(4);
  std::unique_ptr<Model> model = zoo::build(name, {input, 10});
  model->set_remat(remat);
  Shape x_shape = input;
  x_shape.insert(x_shape.begin(), 3);
  Tensor x = Tensor::empty(x_shape);
  Rng rng(8);
  for (int64_t i = 0; i < x.size(); ++i) x.data()[i] = rng.next_float();
  Pass p;
  GradientTape tape;
  const Tensor y = model->call(x, /*training=*/true);
  p.recorded_ops = tape.num_recorded_ops();
  p.output = y.to_vector();
  const Tensor labels = Tensor::zeros({3, 10});
  const Tensor loss = CategoricalCrossentropy()(labels, y);
  for (const Tensor& g : tape.gradient(loss, model->trainable_variables())) p.gradients.push_back(g.to_vector());
  return p;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void expect_segments_exact(const std::string& name, const Shape& input) {
  const Pass plain = forward_and_backward(name, input, Remat::none);
  const Pass remat = forward_and_backward(name, input, Remat::segments);
  EXPECT_TRUE(same_bits(plain.output, remat.output)) << name;
  EXPECT_LT(remat.recorded_ops, plain.recorded_ops) << name;
  ASSERT_EQ(plain.gradients.size(), remat.gradients.size());
  for (size_t i = 0; i < plain.gradients.size(); ++i) {
    EXPECT_TRUE(same_bits(plain.gradients[i], remat.gradients[i])) << name << " gradient " << i;
  }
}

TEST(RematTest, SegmentsOfASequentialAreExact) { expect_segments_exact("mlp", {784}); }

TEST(RematTest, SegmentsOfAResNetAreExact) { expect_segments_exact("resnet18", {32, 32, 1}); }

// Outside training (inference) remat changes nothing: every op runs, and is recorded, as usual.
size_t ops_recorded_in_inference(Remat remat) {
  clear_session();
  std::unique_ptr<Model> model = zoo::build("resnet18", {{32, 32, 1}, 10});
  model->set_remat(remat);
  GradientTape tape;
  model->call(Tensor::zeros({1, 32, 32, 1}), /*training=*/false);
  return tape.num_recorded_ops();
}

TEST(RematTest, InferenceIgnoresRemat) {
  EXPECT_GT(ops_recorded_in_inference(Remat::none), 0u);
  EXPECT_EQ(ops_recorded_in_inference(Remat::segments), ops_recorded_in_inference(Remat::none));
}

}  // namespace
}  // namespace keel
