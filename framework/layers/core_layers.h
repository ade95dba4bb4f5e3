// Keras's core layers: Dense, Activation, Flatten, Dropout, and the factories keel::Dense(...) etc.
#pragma once

#include "framework/layers/layer.h"

namespace keel {
namespace layers {

class Dense : public Layer {
 public:
  struct Options {
    std::string activation = "linear";
    bool use_bias = true;
    std::string kernel_initializer = "glorot_uniform";
    std::string bias_initializer = "zeros";
    std::optional<Shape> input_shape;
    std::string name;
  };
  Dense(int64_t units, Options options);
  std::string class_name() const override { return "Dense"; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor call(const Tensor& x, bool training) override;
  nlohmann::json get_config() const override;
  int64_t units() const { return units_; }
  const std::string& activation() const { return options_.activation; }

 protected:
  void build_weights(const Shape& input_shape) override;
  // A LayoutMap may split the kernel along its output axis (the layer then computes column-parallel,
  // framework/ops/column_parallel.cc) and the bias beside it.
  bool supports_layout(const std::string& weight, int axis) const override {
    return (weight == "kernel" && axis == 1) || (weight == "bias" && axis == 0);
  }

 private:
  int64_t units_;
  Options options_;
  Variable* kernel_ = nullptr;  // (in, units)
  Variable* bias_ = nullptr;    // (units,)
};

class Activation : public Layer {
 public:
  explicit Activation(std::string activation, std::string name = "");
  std::string class_name() const override { return "Activation"; }
  Tensor call(const Tensor& x, bool training) override;
  const std::string& activation() const { return activation_; }
  nlohmann::json get_config() const override;

 private:
  std::string activation_;
};

class Flatten : public Layer {
 public:
  explicit Flatten(std::optional<Shape> input_shape = std::nullopt, std::string name = "");
  std::string class_name() const override { return "Flatten"; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor call(const Tensor& x, bool training) override;
  nlohmann::json get_config() const override;
};

class Dropout : public Layer {
 public:
  explicit Dropout(float rate, std::optional<uint64_t> seed = std::nullopt, std::string name = "");
  std::string class_name() const override { return "Dropout"; }
  Tensor call(const Tensor& x, bool training) override;
  nlohmann::json get_config() const override;

 private:
  float rate_;
  std::optional<uint64_t> seed_;
  uint64_t key_;
};

// Applies a Keras activation by name: "linear", "relu", "softmax". Softmax outputs remember their
// logits (see Tensor::keras_logits).
Tensor apply_activation(const std::string& activation, const Tensor& x);
void check_activation(const std::string& activation);

}  // namespace layers

// Factories spelled like Keras's constructors.
std::shared_ptr<layers::Dense> Dense(int64_t units, const std::string& activation = "linear",
                                     std::optional<Shape> input_shape = std::nullopt);
std::shared_ptr<layers::Dense> Dense(int64_t units, layers::Dense::Options options);
std::shared_ptr<layers::Activation> Activation(const std::string& activation);
std::shared_ptr<layers::Flatten> Flatten(std::optional<Shape> input_shape = std::nullopt);
std::shared_ptr<layers::Dropout> Dropout(float rate, std::optional<uint64_t> seed = std::nullopt);

}  // namespace keel
