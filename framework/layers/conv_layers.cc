#include "framework/layers/conv_layers.h"

#include <stdexcept>

#include "framework/core/limits.h"
#include "framework/layers/core_layers.h"
#include "framework/layers/initializers.h"
#include "framework/ops/concat.h"
#include "framework/ops/conv.h"
#include "framework/ops/ops.h"
#include "framework/ops/pooling.h"

namespace keel {
namespace layers {
namespace {

ops::Padding parse_padding(const std::string& layer, const std::string& padding) {
  if (padding == "valid") return ops::Padding::valid;
  if (padding == "same") return ops::Padding::same;
  throw std::invalid_argument(layer + ": padding must be \"valid\" or \"same\", got \"" + quote_untrusted(padding) + "\"");
}

void check_image(const std::string& layer, const Shape& s) {
  if (s.size() != 3) {
    throw std::invalid_argument(layer + " expects images (height, width, channels), got " + shape_string(s));
  }
}

nlohmann::json pair(const std::array<int, 2>& v) { return nlohmann::json::array({v[0], v[1]}); }

}  // namespace

Conv2D::Conv2D(int64_t filters, std::array<int, 2> kernel_size, Options options)
    : Layer("conv2d", options.name), filters_(filters), kernel_size_(kernel_size), options_(std::move(options)) {
  check_in_range("Conv2D: filters", filters_, 1, kMaxUnits);
  for (int i = 0; i < 2; ++i) {
    check_in_range("Conv2D: kernel size", kernel_size_[i], 1, kMaxKernelSize);
    check_in_range("Conv2D: strides", options_.strides[i], 1, kMaxKernelSize);
    check_in_range("Conv2D: dilation rate", options_.dilation_rate[i], 1, kMaxKernelSize);
  }
  parse_padding("Conv2D", options_.padding);
  check_activation(options_.activation);
}

// The op's own shape rule (ops::conv2d_output_shape), for a batch of unknown size.
Shape Conv2D::compute_output_shape(const Shape& s) const {
  check_image("Conv2D '" + name() + "'", s);
  try {
    const Shape out = ops::conv2d_output_shape({-1, s[0], s[1], s[2]}, {kernel_size_[0], kernel_size_[1], s[2], filters_},
                                               options_.strides, parse_padding("Conv2D", options_.padding),
                                               options_.dilation_rate);
    return {out[1], out[2], out[3]};
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("Conv2D '" + name() + "' on input " + shape_string(s) + ": " + e.what());
  }
}

void Conv2D::build_weights(const Shape& s) {
  compute_output_shape(s);  // refuses an input the convolution cannot take, before any weight exists
  kernel_ = &add_weight("kernel", {kernel_size_[0], kernel_size_[1], s[2], filters_}, options_.kernel_initializer);
  if (options_.use_bias) bias_ = &add_weight("bias", {filters_}, options_.bias_initializer);
}

Tensor Conv2D::call(const Tensor& x, bool training) {
  Tensor y = ops::conv2d(x, kernel_->value(), options_.strides, parse_padding("Conv2D", options_.padding),
                         options_.dilation_rate, bias_ ? bias_->value() : Tensor());
  return apply_activation(options_.activation, y);
}

nlohmann::json Conv2D::get_config() const {
  nlohmann::json c = Layer::get_config();
  c["filters"] = filters_;
  c["kernel_size"] = pair(kernel_size_);
  c["strides"] = pair(options_.strides);
  c["padding"] = options_.padding;
  c["data_format"] = "channels_last";
  c["dilation_rate"] = pair(options_.dilation_rate);
  c["groups"] = 1;
  c["activation"] = options_.activation;
  c["use_bias"] = options_.use_bias;
  c["kernel_initializer"] = initializer_config(options_.kernel_initializer);
  c["bias_initializer"] = initializer_config(options_.bias_initializer);
  c["kernel_regularizer"] = nullptr;
  c["bias_regularizer"] = nullptr;
  c["activity_regularizer"] = nullptr;
  c["kernel_constraint"] = nullptr;
  c["bias_constraint"] = nullptr;
  return c;
}

ZeroPadding2D::ZeroPadding2D(std::array<std::array<int, 2>, 2> padding, std::string name)
    : Layer("zero_padding2d", name), padding_(padding) {
  for (const auto& p : padding_) {
    for (int side : p) check_in_range("ZeroPadding2D: padding", side, 0, kMaxKernelSize);
  }
}

Shape ZeroPadding2D::compute_output_shape(const Shape& s) const {
  check_image("ZeroPadding2D '" + name() + "'", s);
  const Shape out = ops::zero_pad2d_output_shape({-1, s[0], s[1], s[2]},
                                                 {padding_[0][0], padding_[0][1], padding_[1][0], padding_[1][1]});
  return {out[1], out[2], out[3]};
}

Tensor ZeroPadding2D::call(const Tensor& x, bool training) {
  return ops::zero_pad2d(x, {padding_[0][0], padding_[0][1], padding_[1][0], padding_[1][1]});
}

nlohmann::json ZeroPadding2D::get_config() const {
  nlohmann::json c = Layer::get_config();
  c["padding"] = {pair(padding_[0]), pair(padding_[1])};
  c["data_format"] = "channels_last";
  return c;
}

Pooling2D::Pooling2D(Kind kind, std::array<int, 2> pool_size, std::array<int, 2> strides, std::string padding, std::string name)
    : Layer(kind == Kind::max ? "max_pooling2d" : "average_pooling2d", name),
      kind_(kind), pool_size_(pool_size), strides_(strides), padding_(std::move(padding)) {
  for (int i = 0; i < 2; ++i) {
    check_in_range("pooling: pool size", pool_size_[i], 1, kMaxKernelSize);
    check_in_range("pooling: strides", strides_[i], 1, kMaxKernelSize);
  }
  parse_padding(class_name(), padding_);
}

// The op's own shape rule (ops::pool2d_output_shape), for a batch of unknown size.
Shape Pooling2D::compute_output_shape(const Shape& s) const {
  check_image(class_name() + " '" + name() + "'", s);
  try {
    const Shape out = ops::pool2d_output_shape({-1, s[0], s[1], s[2]}, pool_size_, strides_,
                                               parse_padding(class_name(), padding_));
    return {out[1], out[2], out[3]};
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(class_name() + " '" + name() + "' on input " + shape_string(s) + ": " + e.what());
  }
}

Tensor Pooling2D::call(const Tensor& x, bool training) {
  const ops::Padding p = parse_padding(class_name(), padding_);
  return kind_ == Kind::max ? ops::max_pool2d(x, pool_size_, strides_, p) : ops::avg_pool2d(x, pool_size_, strides_, p);
}

nlohmann::json Pooling2D::get_config() const {
  nlohmann::json c = Layer::get_config();
  c["pool_size"] = pair(pool_size_);
  c["padding"] = padding_;
  c["strides"] = pair(strides_);
  c["data_format"] = "channels_last";
  return c;
}

GlobalAveragePooling2D::GlobalAveragePooling2D(std::string name) : Layer("global_average_pooling2d", name) {}

Shape GlobalAveragePooling2D::compute_output_shape(const Shape& s) const {
  check_image("GlobalAveragePooling2D '" + name() + "'", s);
  return {s[2]};
}

Tensor GlobalAveragePooling2D::call(const Tensor& x, bool training) { return ops::global_avg_pool2d(x); }

nlohmann::json GlobalAveragePooling2D::get_config() const {
  nlohmann::json c = Layer::get_config();
  c["data_format"] = "channels_last";
  c["keepdims"] = false;
  return c;
}

GlobalMaxPooling2D::GlobalMaxPooling2D(std::string name) : Layer("global_max_pooling2d", name) {}

Shape GlobalMaxPooling2D::compute_output_shape(const Shape& s) const {
  check_image("GlobalMaxPooling2D '" + name() + "'", s);
  return {s[2]};
}

// One max pool whose window is the whole image, then (N, 1, 1, C) -> (N, C): max_pool2d's backward
// (the gradient to the first maximum) is TensorFlow's reduce_max gradient on ties too.
Tensor GlobalMaxPooling2D::call(const Tensor& x, bool training) {
  if (x.rank() != 4) throw std::invalid_argument("GlobalMaxPooling2D '" + name() + "' expects (N, H, W, C), got " + shape_string(x.shape()));
  const std::array<int, 2> window = {static_cast<int>(x.dim(1)), static_cast<int>(x.dim(2))};
  return ops::reshape(ops::max_pool2d(x, window, window, ops::Padding::valid), {x.dim(0), x.dim(3)});
}

nlohmann::json GlobalMaxPooling2D::get_config() const {
  nlohmann::json c = Layer::get_config();
  c["data_format"] = "channels_last";
  c["keepdims"] = false;
  return c;
}

Add::Add(std::string name) : Layer("add", name) {}

void Add::build_weights_multi(const std::vector<Shape>& shapes) { compute_output_shape_multi(shapes); }

Shape Add::compute_output_shape_multi(const std::vector<Shape>& shapes) const {
  if (shapes.size() < 2) throw std::invalid_argument("Add '" + name() + "' needs at least two inputs");
  for (const Shape& s : shapes) {
    if (s != shapes[0]) {
      throw std::invalid_argument("Add '" + name() + "': inputs " + shape_string(shapes[0]) + " and " + shape_string(s) +
                                  " differ");
    }
  }
  return shapes[0];
}

Tensor Add::call_multi(const std::vector<Tensor>& inputs, bool training) {
  Tensor y = inputs.at(0);
  for (size_t i = 1; i < inputs.size(); ++i) y = ops::add(y, inputs[i]);
  return y;
}

Concatenate::Concatenate(int axis, std::string name) : Layer("concatenate", name), axis_(axis) {}

void Concatenate::build_weights_multi(const std::vector<Shape>& shapes) { compute_output_shape_multi(shapes); }

// ops::concat's rule on (batch, ...) shapes; Keras counts the batch axis, which may not be the axis.
Shape Concatenate::compute_output_shape_multi(const std::vector<Shape>& shapes) const {
  if (shapes.size() < 2) throw std::invalid_argument("Concatenate '" + name() + "' needs at least two inputs");
  const int rank = static_cast<int>(shapes[0].size()) + 1;  // with the batch axis
  const int axis = axis_ < 0 ? axis_ + rank : axis_;
  if (axis <= 0 || axis >= rank) throw std::invalid_argument("Concatenate '" + name() + "': bad axis " + std::to_string(axis_));
  std::vector<Shape> batched;
  for (const Shape& s : shapes) {
    batched.push_back(s);
    batched.back().insert(batched.back().begin(), -1);
  }
  try {
    Shape out = ops::concat_output_shape(batched, axis);
    out.erase(out.begin());
    return out;
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("Concatenate '" + name() + "': " + e.what());
  }
}

Tensor Concatenate::call_multi(const std::vector<Tensor>& inputs, bool training) { return ops::concat(inputs, axis_); }

nlohmann::json Concatenate::get_config() const {
  nlohmann::json c = Layer::get_config();
  c["axis"] = axis_;
  return c;
}

}  // namespace layers

std::shared_ptr<layers::Conv2D> Conv2D(int64_t filters, int kernel_size, layers::Conv2D::Options options) {
  return std::make_shared<layers::Conv2D>(filters, std::array<int, 2>{kernel_size, kernel_size}, std::move(options));
}
std::shared_ptr<layers::Conv2D> Conv2D(int64_t filters, std::array<int, 2> kernel_size, layers::Conv2D::Options options) {
  return std::make_shared<layers::Conv2D>(filters, kernel_size, std::move(options));
}
std::shared_ptr<layers::ZeroPadding2D> ZeroPadding2D(int padding, std::string name) {
  return std::make_shared<layers::ZeroPadding2D>(std::array<std::array<int, 2>, 2>{{{padding, padding}, {padding, padding}}},
                                                 std::move(name));
}
std::shared_ptr<layers::ZeroPadding2D> ZeroPadding2D(std::array<std::array<int, 2>, 2> padding, std::string name) {
  return std::make_shared<layers::ZeroPadding2D>(padding, std::move(name));
}
std::shared_ptr<layers::Pooling2D> MaxPooling2D(int pool_size, int strides, std::string padding, std::string name) {
  const int s = strides > 0 ? strides : pool_size;
  return std::make_shared<layers::Pooling2D>(layers::Pooling2D::Kind::max, std::array<int, 2>{pool_size, pool_size},
                                             std::array<int, 2>{s, s}, std::move(padding), std::move(name));
}
std::shared_ptr<layers::Pooling2D> AveragePooling2D(int pool_size, int strides, std::string padding, std::string name) {
  const int s = strides > 0 ? strides : pool_size;
  return std::make_shared<layers::Pooling2D>(layers::Pooling2D::Kind::average, std::array<int, 2>{pool_size, pool_size},
                                             std::array<int, 2>{s, s}, std::move(padding), std::move(name));
}
std::shared_ptr<layers::GlobalAveragePooling2D> GlobalAveragePooling2D(std::string name) {
  return std::make_shared<layers::GlobalAveragePooling2D>(std::move(name));
}
std::shared_ptr<layers::GlobalMaxPooling2D> GlobalMaxPooling2D(std::string name) {
  return std::make_shared<layers::GlobalMaxPooling2D>(std::move(name));
}
std::shared_ptr<layers::Add> Add(std::string name) { return std::make_shared<layers::Add>(std::move(name)); }
std::shared_ptr<layers::Concatenate> Concatenate(int axis, std::string name) {
  return std::make_shared<layers::Concatenate>(axis, std::move(name));
}

}  // namespace keel
