// Remat modes by name, and what they do to a model's forward pass: the same output, fewer ops recorded
// (one per segment or rematerialised layer, then the head's own), and the same gradients.
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
#include "framework/model/functional.h"
#include "framework/ops/conv.h"
#include "tests/support/conv_backend.h"
#include "framework/train/losses.h"
#include "models/zoo.h"

namespace keel {
namespace {

TEST(RematTest, NamesRoundTripAndBadModesAreRefused) {
  EXPECT_EQ(parse_remat("none"), Remat::none);
  EXPECT_EQ(parse_remat("segments"), Remat::segments);
  EXPECT_EQ(parse_remat("full"), Remat::full);
  EXPECT_EQ(parse_remat("larger_than:4MiB"), Remat::larger_than(4 << 20));
  EXPECT_EQ(parse_remat("layers:conv.*"), Remat::layers("conv.*"));
  for (const std::string name : {"none", "segments", "full", "larger_than:1024", "layers:conv2_block.*"}) {
    EXPECT_EQ(remat_name(parse_remat(name)), name);
  }
  for (const std::string bad : {"Segments", "", "larger_than:", "larger_than:-5", "larger_than:lots", "layers:", "layers:(",
                                "list_of_layers"}) {
    EXPECT_THROW(parse_remat(bad), std::invalid_argument) << bad;
  }
  // Which layers the per-layer modes take.
  EXPECT_TRUE(Remat::full.remats_layer("dense", 1));
  EXPECT_TRUE(Remat::larger_than(100).remats_layer("dense", 101));
  EXPECT_FALSE(Remat::larger_than(100).remats_layer("dense", 100));
  EXPECT_TRUE(Remat::layers("conv2_block[12].*").remats_layer("conv2_block1_1_conv", 0));
  EXPECT_FALSE(Remat::layers("conv2_block[12].*").remats_layer("conv3_block1_1_conv", 0));
  EXPECT_FALSE(Remat::layers("conv").remats_layer("conv1_conv", 0)) << "the whole name must match";
  EXPECT_FALSE(Remat::segments.remats_layer("dense", 1 << 30)) << "segments is not a per-layer mode";
}

struct Pass {
  std::vector<float> output;
  size_t recorded_ops = 0;
  std::vector<std::vector<float>> gradients;
};

// fuse: whether a functional model runs its BatchNormalization + ReLU pairs as one op (the per-layer
// modes run every layer on its own, so their op counts compare with a model that does not).
Pass forward_and_backward(const std::string& name, const Shape& input, Remat remat, bool fuse = true) {
  clear_session();
  set_random_seed(4);
  std::unique_ptr<Model> model = zoo::build(name, {input, 10});
  model->set_remat(remat);
  if (auto* functional = dynamic_cast<Functional*>(model.get())) functional->set_fuse_batch_norm_relu(fuse);
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

void expect_exact(const std::string& name, const Shape& input, const Remat& mode) {
  const bool per_layer = mode.mode() != Remat::Mode::none && mode.mode() != Remat::Mode::segments;
  const Pass plain = forward_and_backward(name, input, Remat::none, /*fuse=*/!per_layer);
  const Pass remat = forward_and_backward(name, input, mode);
  EXPECT_TRUE(same_bits(plain.output, remat.output)) << name << " " << remat_name(mode);
  EXPECT_LT(remat.recorded_ops, plain.recorded_ops) << name << " " << remat_name(mode);
  ASSERT_EQ(plain.gradients.size(), remat.gradients.size());
  for (size_t i = 0; i < plain.gradients.size(); ++i) {
    EXPECT_TRUE(same_bits(plain.gradients[i], remat.gradients[i])) << name << " " << remat_name(mode) << " gradient " << i;
  }
}

TEST(RematTest, SegmentsOfASequentialAreExact) { expect_exact("mlp", {784}, Remat::segments); }

TEST(RematTest, SegmentsOfAResNetAreExact) { expect_exact("resnet18", {32, 32, 1}, Remat::segments); }

// Keras's per-layer modes: each rematerialised layer is recorded as one op, and the gradients are
// the same bits.
TEST(RematTest, PerLayerModesAreExact) {
  expect_exact("mlp", {784}, Remat::full);
  expect_exact("resnet18", {32, 32, 1}, Remat::full);
  // On keel's im2col kernels a Conv2D with a bias is two ops, which remat records as one; on oneDNN's
  // float32 kernels it is one op already (the bias added in the convolution's op), and the larger
  // layers here are such convolutions.
  const testing::ConvBackendScope two_op_layers(ops::ConvBackend::im2col);
  expect_exact("resnet18", {32, 32, 1}, Remat::larger_than(3 * 16 * 16 * 64 * 4 - 1));
  expect_exact("resnet18", {32, 32, 1}, Remat::layers("conv[23]_block.*"));
}

// larger_than takes the layers whose output is larger than its threshold, and only those.
TEST(RematTest, LargerThanTakesOnlyLargerOutputs) {
  const testing::ConvBackendScope two_op_layers(ops::ConvBackend::im2col);  // as above
  const Pass plain = forward_and_backward("resnet18", {32, 32, 1}, Remat::none, /*fuse=*/false);
  const Pass none_larger = forward_and_backward("resnet18", {32, 32, 1}, Remat::larger_than(int64_t{1} << 40));
  const Pass some = forward_and_backward("resnet18", {32, 32, 1}, Remat::larger_than(3 * 8 * 8 * 128 * 4));
  const Pass all = forward_and_backward("resnet18", {32, 32, 1}, Remat::full);
  EXPECT_EQ(none_larger.recorded_ops, plain.recorded_ops);
  EXPECT_LT(some.recorded_ops, plain.recorded_ops);
  EXPECT_GT(some.recorded_ops, all.recorded_ops);
}

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
