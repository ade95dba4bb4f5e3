// Keras's convolution, padding, pooling and merge layers: output shapes (TensorFlow's 'valid' and
// 'same' rules), weights, values on small inputs worked out by hand, configs and bad arguments.
#include "framework/layers/conv_layers.h"

#include <array>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/device/context.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using testing::host;

// (1, h, w, 1) holding 0, 1, 2, ... row-major.
Tensor iota_image(int64_t h, int64_t w) {
  std::vector<float> v(static_cast<size_t>(h * w));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  return host({1, h, w, 1}, v);
}

void expect_near_all(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-5f) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

layers::Conv2D::Options conv_options(std::array<int, 2> strides = {1, 1}, const std::string& padding = "valid",
                                     std::array<int, 2> dilation = {1, 1}, const std::string& activation = "linear") {
  layers::Conv2D::Options o;
  o.strides = strides;
  o.padding = padding;
  o.dilation_rate = dilation;
  o.activation = activation;
  return o;
}

TEST(Conv2DTest, WeightsAreHwioWithKerasNames) {
  HostScope scope;
  clear_session();
  auto c = Conv2D(8, 3);
  EXPECT_EQ(c->name(), "conv2d");
  EXPECT_EQ(c->class_name(), "Conv2D");
  c->build({10, 12, 4});
  ASSERT_EQ(c->weights().size(), 2u);
  EXPECT_EQ(c->weights()[0]->name(), "conv2d/kernel");
  EXPECT_EQ(c->weights()[0]->shape(), (Shape{3, 3, 4, 8}));
  EXPECT_EQ(c->weights()[1]->name(), "conv2d/bias");
  EXPECT_EQ(c->weights()[1]->shape(), (Shape{8}));
  EXPECT_EQ(c->count_params(), 3 * 3 * 4 * 8 + 8);
  for (float b : c->weights()[1]->value().to_vector()) EXPECT_EQ(b, 0.0f);
  // glorot_uniform with the receptive field: fan_in 36, fan_out 72.
  const float limit = std::sqrt(6.0f / 108.0f);
  for (float k : c->weights()[0]->value().to_vector()) EXPECT_LE(std::fabs(k), limit);

  layers::Conv2D::Options no_bias;
  no_bias.use_bias = false;
  auto rect = Conv2D(2, std::array<int, 2>{1, 5}, no_bias);
  EXPECT_EQ(rect->name(), "conv2d_1");
  rect->build({6, 6, 3});
  ASSERT_EQ(rect->weights().size(), 1u);
  EXPECT_EQ(rect->weights()[0]->shape(), (Shape{1, 5, 3, 2}));
}

TEST(Conv2DTest, OutputShapesFollowTensorFlowsValidAndSameRules) {
  // valid: floor((in - dilated kernel) / stride) + 1; same: ceil(in / stride).
  EXPECT_EQ(Conv2D(64, 7, conv_options({2, 2}))->compute_output_shape({230, 230, 3}), (Shape{112, 112, 64}));
  EXPECT_EQ(Conv2D(64, 7, conv_options({2, 2}, "same"))->compute_output_shape({224, 224, 3}),
            (Shape{112, 112, 64}));
  EXPECT_EQ(Conv2D(4, 3, conv_options({1, 1}, "same"))->compute_output_shape({7, 9, 2}), (Shape{7, 9, 4}));
  EXPECT_EQ(Conv2D(4, 3, conv_options({2, 1}, "same"))->compute_output_shape({7, 9, 2}), (Shape{4, 9, 4}));
  EXPECT_EQ(Conv2D(4, 3)->compute_output_shape({7, 9, 2}), (Shape{5, 7, 4}));
  EXPECT_EQ(Conv2D(4, 3, conv_options({1, 1}, "valid", {2, 2}))->compute_output_shape({7, 9, 2}), (Shape{3, 5, 4}));
  EXPECT_EQ(Conv2D(4, 3, conv_options({2, 2}))->compute_output_shape({7, 8, 1}), (Shape{3, 3, 4}));
  EXPECT_EQ(Conv2D(4, 3, conv_options({2, 2}, "same"))->compute_output_shape({7, 8, 1}), (Shape{4, 4, 4}));
  EXPECT_EQ(Conv2D(4, 3, conv_options({3, 3}, "same"))->compute_output_shape({5, 7, 1}), (Shape{2, 3, 4}));
  EXPECT_EQ(Conv2D(4, 7, conv_options({1, 1}, "same"))->compute_output_shape({1, 1, 1}), (Shape{1, 1, 4}));
  // An input smaller than the (dilated) kernel has no valid output: refused, not a 0-sized output.
  EXPECT_THROW(Conv2D(4, 5)->compute_output_shape({4, 9, 1}), std::invalid_argument);
  EXPECT_THROW(Conv2D(4, 3, conv_options({1, 1}, "valid", {3, 3}))->compute_output_shape({6, 9, 1}), std::invalid_argument);
}

// Kernel of ones on the 4x4 image 0..15.
Tensor conv_ones(const Tensor& x, int k, layers::Conv2D::Options o) {
  auto c = Conv2D(1, k, std::move(o));
  c->build({x.dim(1), x.dim(2), 1});
  c->weights()[0]->assign(Tensor::full({k, k, 1, 1}, 1.0f));
  const Tensor y = (*c)(x);
  EXPECT_EQ(y.shape(), (Shape{1, c->compute_output_shape({x.dim(1), x.dim(2), 1})[0],
                              c->compute_output_shape({x.dim(1), x.dim(2), 1})[1], 1}));
  return y;
}

TEST(Conv2DTest, ValidWindowSums) {
  HostScope scope;
  // 3x3 windows of 0..15 (4x4) at (0,0), (0,1), (1,0), (1,1).
  expect_near_all(conv_ones(iota_image(4, 4), 3, conv_options()).to_vector(), {45, 54, 81, 90});
}

TEST(Conv2DTest, SameWithStridePadsTheExtraRowAndColumnAtTheEnd) {
  HostScope scope;
  // 4 -> 2 with stride 2 and a 3x3 kernel: TensorFlow pads 1 in total, all of it after (bottom,
  // right), so the first window starts at (0,0): rows 0-2 x cols 0-2, rows 0-2 x cols 2-3, ...
  expect_near_all(conv_ones(iota_image(4, 4), 3, conv_options({2, 2}, "same")).to_vector(), {45, 39, 66, 50});
  // Stride 1: one row/column of zeros on each side; the corner windows see 2x2 pixels.
  const std::vector<float> y = conv_ones(iota_image(3, 3), 3, conv_options({1, 1}, "same")).to_vector();
  expect_near_all(y, {8, 15, 12, 21, 36, 27, 20, 33, 24});
}

TEST(Conv2DTest, DilatedKernelSamplesEveryOtherPixel) {
  HostScope scope;
  // 5x5 image 0..24, 3x3 kernel of ones with dilation 2: rows and columns {0, 2, 4}.
  expect_near_all(conv_ones(iota_image(5, 5), 3, conv_options({1, 1}, "valid", {2, 2})).to_vector(), {108});
}

TEST(Conv2DTest, KernelLayoutIsInputThenOutputChannelAndBiasIsAdded) {
  HostScope scope;
  auto c = Conv2D(2, 1);
  c->build({1, 1, 2});
  // HWIO (1, 1, 2, 2): K[in][out] = [[1, 2], [3, 4]].
  c->weights()[0]->assign(host({1, 1, 2, 2}, {1, 2, 3, 4}));
  c->weights()[1]->assign(host({2}, {0.5f, -0.5f}));
  // One pixel (1, 10): out0 = 1*1 + 10*3 + 0.5, out1 = 1*2 + 10*4 - 0.5.
  expect_near_all((*c)(host({1, 1, 1, 2}, {1, 10})).to_vector(), {31.5f, 41.5f});

  auto r = Conv2D(1, 1, conv_options({1, 1}, "valid", {1, 1}, "relu"));
  r->build({1, 2, 1});
  r->weights()[0]->assign(host({1, 1, 1, 1}, {-1}));
  expect_near_all((*r)(host({1, 1, 2, 1}, {3, -4})).to_vector(), {0, 4});
}

TEST(Conv2DTest, GetConfigIsKeras) {
  clear_session();
  layers::Conv2D::Options o = conv_options({2, 2}, "same");
  o.name = "conv1_conv";
  auto c = Conv2D(64, 7, o);
  EXPECT_EQ(c->get_config(), nlohmann::json::parse(R"({
    "name": "conv1_conv", "trainable": true, "dtype": "float32",
    "filters": 64, "kernel_size": [7, 7], "strides": [2, 2], "padding": "same",
    "data_format": "channels_last", "dilation_rate": [1, 1], "groups": 1, "activation": "linear",
    "use_bias": true,
    "kernel_initializer": {"class_name": "GlorotUniform", "config": {"seed": null}},
    "bias_initializer": {"class_name": "Zeros", "config": {}},
    "kernel_regularizer": null, "bias_regularizer": null, "activity_regularizer": null,
    "kernel_constraint": null, "bias_constraint": null})"));
}

TEST(Conv2DTest, BadArgumentsAreRefused) {
  HostScope scope;
  EXPECT_THROW(Conv2D(0, 3), std::invalid_argument);
  EXPECT_THROW(Conv2D(4, 0), std::invalid_argument);
  EXPECT_THROW(Conv2D(4, std::array<int, 2>{3, -1}), std::invalid_argument);
  EXPECT_THROW(Conv2D(int64_t{1} << 40, 3), std::invalid_argument) << "filters past keel's limit, 2^24";
  EXPECT_THROW(Conv2D(4, 5000), std::invalid_argument) << "a kernel past keel's limit, 2^12";
  EXPECT_THROW(Conv2D(4, 3, conv_options({1, 1}, "valid", {100000, 1})), std::invalid_argument);
  EXPECT_THROW(Conv2D(4, 3, conv_options({0, 1})), std::invalid_argument);
  EXPECT_THROW(Conv2D(4, 3, conv_options({1, 1}, "valid", {1, 0})), std::invalid_argument);
  EXPECT_THROW(Conv2D(4, 3, conv_options({1, 1}, "full")), std::invalid_argument);
  EXPECT_THROW(Conv2D(4, 3, conv_options({1, 1}, "causal")), std::invalid_argument);
  EXPECT_THROW(Conv2D(4, 3, conv_options({1, 1}, "valid", {1, 1}, "tanh")), std::invalid_argument);
  auto c = Conv2D(4, 3);
  EXPECT_THROW(c->compute_output_shape({28, 28}), std::invalid_argument) << "images are (height, width, channels)";
  EXPECT_THROW(c->build({28, 28}), std::invalid_argument);
  EXPECT_THROW(c->build({2, 8, 1}), std::invalid_argument) << "an input smaller than the kernel";
  EXPECT_FALSE(c->built());
  EXPECT_TRUE(c->weights().empty());
}

TEST(ZeroPadding2DTest, ShapesValuesAndConfig) {
  HostScope scope;
  clear_session();
  auto p = ZeroPadding2D(3);
  EXPECT_EQ(p->name(), "zero_padding2d");
  EXPECT_EQ(p->class_name(), "ZeroPadding2D");
  EXPECT_EQ(p->compute_output_shape({224, 224, 3}), (Shape{230, 230, 3}));
  EXPECT_EQ(p->get_config(), nlohmann::json::parse(R"({"name": "zero_padding2d", "trainable": true,
    "dtype": "float32", "padding": [[3, 3], [3, 3]], "data_format": "channels_last"})"));

  auto q = ZeroPadding2D({{{1, 2}, {3, 4}}});
  EXPECT_EQ(q->name(), "zero_padding2d_1");
  EXPECT_EQ(q->compute_output_shape({5, 6, 2}), (Shape{8, 13, 2}));
  EXPECT_EQ(q->get_config().at("padding"), nlohmann::json::parse("[[1, 2], [3, 4]]"));

  // ((top 1, bottom 0), (left 0, right 2)) around [[1, 2], [3, 4]].
  auto r = ZeroPadding2D({{{1, 0}, {0, 2}}});
  const Tensor y = (*r)(host({1, 2, 2, 1}, {1, 2, 3, 4}));
  EXPECT_EQ(y.shape(), (Shape{1, 3, 4, 1}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0, 0}));
  EXPECT_TRUE(r->weights().empty());
}

TEST(ZeroPadding2DTest, BadArgumentsAreRefused) {
  EXPECT_THROW(ZeroPadding2D(-1), std::invalid_argument);
  EXPECT_THROW(ZeroPadding2D({{{0, 0}, {0, -2}}}), std::invalid_argument);
  EXPECT_THROW(ZeroPadding2D(1 << 20), std::invalid_argument) << "padding past keel's limit, 2^12";
  EXPECT_THROW(ZeroPadding2D(1)->compute_output_shape({5, 5}), std::invalid_argument);
}

TEST(Pooling2DTest, NamesDefaultsAndConfigs) {
  clear_session();
  auto m = MaxPooling2D();
  EXPECT_EQ(m->name(), "max_pooling2d");
  EXPECT_EQ(m->class_name(), "MaxPooling2D");
  EXPECT_EQ(m->get_config(), nlohmann::json::parse(R"({"name": "max_pooling2d", "trainable": true,
    "dtype": "float32", "pool_size": [2, 2], "padding": "valid", "strides": [2, 2],
    "data_format": "channels_last"})")) << "strides default to the pool size";
  auto a = AveragePooling2D(3, 1, "same");
  EXPECT_EQ(a->name(), "average_pooling2d");
  EXPECT_EQ(a->class_name(), "AveragePooling2D");
  EXPECT_EQ(a->get_config(), nlohmann::json::parse(R"({"name": "average_pooling2d", "trainable": true,
    "dtype": "float32", "pool_size": [3, 3], "padding": "same", "strides": [1, 1],
    "data_format": "channels_last"})"));
  EXPECT_TRUE(m->weights().empty());
}

TEST(Pooling2DTest, OutputShapes) {
  EXPECT_EQ(MaxPooling2D()->compute_output_shape({5, 5, 3}), (Shape{2, 2, 3}));
  EXPECT_EQ(MaxPooling2D(2, 0, "same")->compute_output_shape({5, 5, 3}), (Shape{3, 3, 3}));
  EXPECT_EQ(MaxPooling2D(3, 2)->compute_output_shape({114, 114, 64}), (Shape{56, 56, 64}));
  EXPECT_EQ(AveragePooling2D(2, 1)->compute_output_shape({4, 6, 1}), (Shape{3, 5, 1}));
  EXPECT_THROW(MaxPooling2D()->compute_output_shape({4, 4}), std::invalid_argument);
  EXPECT_THROW(MaxPooling2D(3)->compute_output_shape({2, 5, 1}), std::invalid_argument)
      << "a valid window larger than the input";
  EXPECT_EQ(MaxPooling2D(3, 0, "same")->compute_output_shape({2, 5, 1}), (Shape{1, 2, 1}));
  auto p = MaxPooling2D(3);
  EXPECT_THROW((*p)(iota_image(2, 2)), std::invalid_argument);
}

TEST(Pooling2DTest, ValidPoolingValues) {
  HostScope scope;
  // 2x2 windows of 0..15 (4x4).
  EXPECT_EQ((*MaxPooling2D())(iota_image(4, 4)).to_vector(), (std::vector<float>{5, 7, 13, 15}));
  expect_near_all((*AveragePooling2D())(iota_image(4, 4)).to_vector(), {2.5f, 4.5f, 10.5f, 12.5f});
}

TEST(Pooling2DTest, SamePoolingAveragesOnlyPixelsInsideTheImage) {
  HostScope scope;
  // 3x3 image 0..8, pool 2 stride 2 'same': padding after, windows {0,1,3,4}, {2,5}, {6,7}, {8}.
  const Tensor x = iota_image(3, 3);
  EXPECT_EQ((*MaxPooling2D(2, 2, "same"))(x).to_vector(), (std::vector<float>{4, 5, 7, 8}));
  expect_near_all((*AveragePooling2D(2, 2, "same"))(x).to_vector(), {2.0f, 3.5f, 6.5f, 8.0f});
}

TEST(Pooling2DTest, BadArgumentsAreRefused) {
  using layers::Pooling2D;
  EXPECT_THROW(MaxPooling2D(0), std::invalid_argument);
  EXPECT_THROW(MaxPooling2D(1 << 20), std::invalid_argument) << "a pool past keel's limit, 2^12";
  EXPECT_THROW(AveragePooling2D(2, 2, "full"), std::invalid_argument);
  EXPECT_THROW(Pooling2D(Pooling2D::Kind::max, {2, 2}, {0, 2}, "valid", ""), std::invalid_argument);
  EXPECT_THROW(Pooling2D(Pooling2D::Kind::average, {2, -1}, {2, 2}, "valid", ""), std::invalid_argument);
}

TEST(GlobalAveragePooling2DTest, MeansEveryChannelOverHeightAndWidth) {
  HostScope scope;
  clear_session();
  auto g = GlobalAveragePooling2D();
  EXPECT_EQ(g->name(), "global_average_pooling2d");
  EXPECT_EQ(g->compute_output_shape({7, 7, 2048}), (Shape{2048}));
  // Two images of 2x2 pixels with channels (k, 10k) and (-k, 0).
  const Tensor x = host({2, 2, 2, 2}, {1, 10, 2, 20, 3, 30, 4, 40, -1, 0, -2, 0, -3, 0, -4, 0});
  const Tensor y = (*g)(x);
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  expect_near_all(y.to_vector(), {2.5f, 25.0f, -2.5f, 0.0f});
  EXPECT_EQ(g->get_config(), nlohmann::json::parse(R"({"name": "global_average_pooling2d", "trainable": true,
    "dtype": "float32", "data_format": "channels_last", "keepdims": false})"));
  EXPECT_THROW(g->compute_output_shape({7, 2048}), std::invalid_argument);
}

TEST(GlobalMaxPooling2DTest, TakesEveryChannelsMaxAndRoutesItsGradientThere) {
  HostScope scope;
  clear_session();
  auto g = GlobalMaxPooling2D();
  EXPECT_EQ(g->name(), "global_max_pooling2d");
  EXPECT_EQ(g->compute_output_shape({7, 7, 2048}), (Shape{2048}));
  const Tensor x = host({2, 2, 2, 2}, {1, 10, 2, 20, 3, 30, 4, 40, -1, 0, -2, 5, -3, 0, -4, 0});
  const Tensor y = (*g)(x);
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  expect_near_all(y.to_vector(), {4.0f, 40.0f, -1.0f, 5.0f});
  EXPECT_EQ(g->get_config()["keepdims"], false);
  EXPECT_THROW(g->compute_output_shape({7, 2048}), std::invalid_argument);
  // Distinct values (no ties), so the gradient is well defined for finite differences.
  testing::expect_gradients_match([&](const std::vector<Tensor>& in) { return (*g)(in[0]); },
                                  {testing::random_host({2, 3, 4, 3}, -1, 1, 41)});
}

TEST(AddTest, SumsItsInputs) {
  HostScope scope;
  clear_session();
  auto add = Add();
  EXPECT_EQ(add->name(), "add");
  EXPECT_EQ(add->class_name(), "Add");
  const Tensor a = host({2, 2}, {1, 2, 3, 4}), b = host({2, 2}, {10, 20, 30, 40}), c = host({2, 2}, {-1, -1, -1, -1});
  EXPECT_EQ(add->apply({a, b}, false).to_vector(), (std::vector<float>{11, 22, 33, 44}));
  EXPECT_EQ(add->input_shapes(), (std::vector<Shape>{{2}, {2}}));
  EXPECT_TRUE(add->weights().empty());
  EXPECT_EQ(Add()->apply({a, b, c}, false).to_vector(), (std::vector<float>{10, 21, 32, 43}));
  EXPECT_EQ(add->compute_output_shape_multi({{4, 4, 8}, {4, 4, 8}}), (Shape{4, 4, 8}));
  EXPECT_EQ(add->get_config(), nlohmann::json::parse(R"({"name": "add", "trainable": true, "dtype": "float32"})"));
}

TEST(AddTest, DifferentShapesOrASingleInputAreRefused) {
  HostScope scope;
  EXPECT_THROW(Add()->compute_output_shape_multi({{4, 4, 8}, {4, 4, 4}}), std::invalid_argument);
  EXPECT_THROW(Add()->compute_output_shape_multi({{3}}), std::invalid_argument);
  EXPECT_THROW(Add()->apply({host({1, 2}, {1, 2}), host({1, 3}, {1, 2, 3})}, false), std::invalid_argument);
  EXPECT_THROW((*Add())(host({1, 2}, {1, 2})), std::invalid_argument);
}

TEST(ConcatenateTest, JoinsAlongTheAxisCountedWithTheBatch) {
  HostScope scope;
  clear_session();
  auto cat = Concatenate();
  EXPECT_EQ(cat->name(), "concatenate");
  EXPECT_EQ(cat->class_name(), "Concatenate");
  const Tensor y = cat->apply({host({2, 2}, {1, 2, 3, 4}), host({2, 1}, {9, 8})}, false);
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{1, 2, 9, 3, 4, 8}));
  EXPECT_EQ(cat->compute_output_shape_multi({{7, 7, 64}, {7, 7, 32}, {7, 7, 1}}), (Shape{7, 7, 97}));

  // axis=1: the first axis after the batch.
  auto rows = Concatenate(1);
  EXPECT_EQ(rows->compute_output_shape_multi({{1, 2}, {2, 2}}), (Shape{3, 2}));
  const Tensor z = rows->apply({host({2, 1, 2}, {1, 2, 3, 4}), host({2, 2, 2}, {5, 6, 7, 8, 9, 10, 11, 12})}, false);
  EXPECT_EQ(z.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(z.to_vector(), (std::vector<float>{1, 2, 5, 6, 7, 8, 3, 4, 9, 10, 11, 12}));
  EXPECT_EQ(rows->get_config(), nlohmann::json::parse(
      R"({"name": "concatenate_1", "trainable": true, "dtype": "float32", "axis": 1})"));
  EXPECT_EQ(cat->get_config().at("axis"), -1);
}

TEST(ConcatenateTest, BadAxesAndShapesAreRefused) {
  HostScope scope;
  EXPECT_THROW(Concatenate(0)->compute_output_shape_multi({{2}, {3}}), std::invalid_argument) << "the batch axis";
  EXPECT_THROW(Concatenate(2)->compute_output_shape_multi({{2}, {3}}), std::invalid_argument);
  EXPECT_THROW(Concatenate(-3)->compute_output_shape_multi({{2}, {3}}), std::invalid_argument);
  EXPECT_THROW(Concatenate()->compute_output_shape_multi({{2, 3}, {4, 3}}), std::invalid_argument)
      << "inputs differing off the concatenation axis";
  EXPECT_THROW(Concatenate()->compute_output_shape_multi({{2, 3}, {3}}), std::invalid_argument);
  EXPECT_THROW(Concatenate()->compute_output_shape_multi({{2}}), std::invalid_argument);
  EXPECT_THROW(Concatenate()->apply({host({1, 2}, {1, 2}), host({2, 2}, {1, 2, 3, 4})}, false), std::invalid_argument);
}

}  // namespace
}  // namespace keel
