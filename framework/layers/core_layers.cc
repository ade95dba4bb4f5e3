#include "framework/layers/core_layers.h"

#include <stdexcept>

#include "framework/core/limits.h"
#include "framework/core/random.h"
#include "framework/device/replica_context.h"
#include "framework/layers/initializers.h"
#include "framework/ops/ops.h"

namespace keel {
namespace layers {

void check_activation(const std::string& activation) {
  if (activation != "linear" && activation != "relu" && activation != "softmax") {
    throw std::invalid_argument("unknown activation '" + quote_untrusted(activation) + "' (known: linear, relu, softmax)");
  }
}

Tensor apply_activation(const std::string& activation, const Tensor& x) {
  if (activation == "linear") return x;
  if (activation == "relu") return ops::relu(x);
  if (activation == "softmax") {
    Tensor y = ops::softmax(x);
    y.set_keras_logits(x);
    return y;
  }
  check_activation(activation);
  return x;
}

Dense::Dense(int64_t units, Options options) : Layer("dense", options.name), units_(units), options_(std::move(options)) {
  check_in_range("Dense: units", units_, 1, kMaxUnits);
  check_activation(options_.activation);
  if (options_.input_shape) set_declared_input_shape(*options_.input_shape);
}

Shape Dense::compute_output_shape(const Shape& input_shape) const {
  Shape out = input_shape;
  if (out.empty()) throw std::invalid_argument("Dense '" + name() + "' needs an input with at least one axis");
  out.back() = units_;
  return out;
}

void Dense::build_weights(const Shape& input_shape) {
  if (input_shape.empty()) throw std::invalid_argument("Dense '" + name() + "' needs an input with at least one axis");
  kernel_ = &add_weight("kernel", {input_shape.back(), units_}, options_.kernel_initializer);
  if (options_.use_bias) bias_ = &add_weight("bias", {units_}, options_.bias_initializer);
  if (bias_ != nullptr && bias_->sharded_axis() >= 0 && kernel_->sharded_axis() != 1) {
    throw std::invalid_argument("Dense '" + name() + "': a LayoutMap splits its bias but not its kernel's output axis; "
                                "lay out the kernel as (None, model) too, or neither");
  }
}

Tensor Dense::call(const Tensor& x, bool training) {
  const int64_t in = kernel_->shape()[0];
  if (x.dim(-1) != in) {
    throw std::invalid_argument("Dense '" + name() + "' expects inputs with last axis " + std::to_string(in) +
                                ", got " + shape_string(x.shape()));
  }
  // Dense acts on the last axis: (..., in) -> (..., units).
  const bool flat = x.rank() == 2;
  Tensor x2 = flat ? x : ops::reshape(x, {-1, in});
  // A kernel split along its output axis (a LayoutMap's) computes column-parallel inside a run;
  // elsewhere the replicas' shared host buffer holds it whole.
  const ReplicaContext* ctx = current_replica_context();
  const bool column_parallel = kernel_->sharded_axis() == 1 && ctx != nullptr && ctx->has_collectives();
  const bool bias_split = column_parallel && bias_ != nullptr && bias_->sharded_axis() == 0;
  Tensor y = column_parallel ? ops::column_parallel_matmul(x2, kernel_->value(), bias_split ? bias_->value() : Tensor())
                             : ops::matmul(x2, kernel_->value());
  if (bias_ && !bias_split) y = ops::bias_add(y, bias_->value());
  if (!flat) {
    Shape out = x.shape();
    out.back() = units_;
    y = ops::reshape(y, out);
  }
  return apply_activation(options_.activation, y);
}

nlohmann::json Dense::get_config() const {
  nlohmann::json config = Layer::get_config();
  config["units"] = units_;
  config["activation"] = options_.activation;
  config["use_bias"] = options_.use_bias;
  config["kernel_initializer"] = initializer_config(options_.kernel_initializer);
  config["bias_initializer"] = initializer_config(options_.bias_initializer);
  config["kernel_regularizer"] = nullptr;
  config["bias_regularizer"] = nullptr;
  config["activity_regularizer"] = nullptr;
  config["kernel_constraint"] = nullptr;
  config["bias_constraint"] = nullptr;
  return config;
}

Activation::Activation(std::string activation, std::string name)
    : Layer("activation", name), activation_(std::move(activation)) {
  check_activation(activation_);
}

Tensor Activation::call(const Tensor& x, bool training) { return apply_activation(activation_, x); }

nlohmann::json Activation::get_config() const {
  nlohmann::json config = Layer::get_config();
  config["activation"] = activation_;
  return config;
}

Flatten::Flatten(std::optional<Shape> input_shape, std::string name) : Layer("flatten", name) {
  if (input_shape) set_declared_input_shape(*input_shape);
}

Shape Flatten::compute_output_shape(const Shape& input_shape) const { return {num_elements(input_shape)}; }

Tensor Flatten::call(const Tensor& x, bool training) {
  if (x.rank() == 2) return x;
  return ops::reshape(x, {x.dim(0), x.dim(0) == 0 ? 0 : x.size() / x.dim(0)});
}

nlohmann::json Flatten::get_config() const {
  nlohmann::json config = Layer::get_config();
  config["data_format"] = "channels_last";
  return config;
}

Dropout::Dropout(float rate, std::optional<uint64_t> seed, std::string name)
    : Layer("dropout", name), rate_(rate), seed_(seed), key_(seed ? *seed : next_initializer_key()) {
  if (!(rate >= 0.0f && rate < 1.0f)) {
    throw std::invalid_argument("Dropout: rate must be in [0, 1), got " + std::to_string(rate));
  }
}

Tensor Dropout::call(const Tensor& x, bool training) {
  if (!training || rate_ == 0.0f) return x;
  // The mask is a function of (seed, step, replica) through the replica context, so a custom loop,
  // fit() and a resumed run draw the same masks at the same step. Outside strategy.run: step 0,
  // replica 0.
  const ReplicaContext* ctx = current_replica_context();
  const uint64_t key = ctx != nullptr ? ctx->random_key(key_) : combine_keys(key_, combine_keys(0, 0));
  return ops::dropout(x, rate_, key);
}

nlohmann::json Dropout::get_config() const {
  nlohmann::json config = Layer::get_config();
  config["rate"] = rate_;
  config["noise_shape"] = nullptr;
  config["seed"] = seed_ ? nlohmann::json(*seed_) : nlohmann::json(nullptr);
  return config;
}

}  // namespace layers

std::shared_ptr<layers::Dense> Dense(int64_t units, const std::string& activation, std::optional<Shape> input_shape) {
  layers::Dense::Options options;
  options.activation = activation;
  options.input_shape = std::move(input_shape);
  return std::make_shared<layers::Dense>(units, std::move(options));
}

std::shared_ptr<layers::Dense> Dense(int64_t units, layers::Dense::Options options) {
  return std::make_shared<layers::Dense>(units, std::move(options));
}

std::shared_ptr<layers::Activation> Activation(const std::string& activation) {
  return std::make_shared<layers::Activation>(activation);
}

std::shared_ptr<layers::Flatten> Flatten(std::optional<Shape> input_shape) {
  return std::make_shared<layers::Flatten>(std::move(input_shape));
}

std::shared_ptr<layers::Dropout> Dropout(float rate, std::optional<uint64_t> seed) {
  return std::make_shared<layers::Dropout>(rate, seed);
}

}  // namespace keel
