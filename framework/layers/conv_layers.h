// Keras's convolution, padding and pooling layers (NHWC, "channels_last"), and the merge layers.
#pragma once

#include <array>
#include <string>

#include "framework/layers/layer.h"

namespace keel {
namespace layers {

class Conv2D : public Layer {
 public:
  struct Options {
    std::array<int, 2> strides{1, 1};
    std::string padding = "valid";  // "valid" | "same"
    std::array<int, 2> dilation_rate{1, 1};
    std::string activation = "linear";
    bool use_bias = true;
    std::string kernel_initializer = "glorot_uniform";
    std::string bias_initializer = "zeros";
    std::string name;
  };
  Conv2D(int64_t filters, std::array<int, 2> kernel_size, Options options);
  std::string class_name() const override { return "Conv2D"; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor call(const Tensor& x, bool training) override;
  nlohmann::json get_config() const override;

 protected:
  void build_weights(const Shape& input_shape) override;

 private:
  int64_t filters_;
  std::array<int, 2> kernel_size_;
  Options options_;
  Variable* kernel_ = nullptr;  // (KH, KW, Cin, filters), HWIO
  Variable* bias_ = nullptr;    // (filters,)
};

class ZeroPadding2D : public Layer {
 public:
  // ((top, bottom), (left, right)), as Keras's padding=((1, 1), (2, 2)).
  explicit ZeroPadding2D(std::array<std::array<int, 2>, 2> padding, std::string name = "");
  std::string class_name() const override { return "ZeroPadding2D"; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor call(const Tensor& x, bool training) override;
  nlohmann::json get_config() const override;

 private:
  std::array<std::array<int, 2>, 2> padding_;
};

class Pooling2D : public Layer {
 public:
  enum class Kind { max, average };
  Pooling2D(Kind kind, std::array<int, 2> pool_size, std::array<int, 2> strides, std::string padding, std::string name);
  std::string class_name() const override { return kind_ == Kind::max ? "MaxPooling2D" : "AveragePooling2D"; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor call(const Tensor& x, bool training) override;
  nlohmann::json get_config() const override;

 private:
  Kind kind_;
  std::array<int, 2> pool_size_, strides_;
  std::string padding_;
};

class GlobalAveragePooling2D : public Layer {
 public:
  explicit GlobalAveragePooling2D(std::string name = "");
  std::string class_name() const override { return "GlobalAveragePooling2D"; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor call(const Tensor& x, bool training) override;
  nlohmann::json get_config() const override;
};

// Max over H and W: (N, H, W, C) -> (N, C). Keras's GlobalMaxPooling2D (channels_last, no keepdims).
class GlobalMaxPooling2D : public Layer {
 public:
  explicit GlobalMaxPooling2D(std::string name = "");
  std::string class_name() const override { return "GlobalMaxPooling2D"; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  Tensor call(const Tensor& x, bool training) override;
  nlohmann::json get_config() const override;
};

class Add : public Layer {
 public:
  explicit Add(std::string name = "");
  std::string class_name() const override { return "Add"; }
  Shape compute_output_shape_multi(const std::vector<Shape>& input_shapes) const override;
  Tensor call(const Tensor& x, bool training) override { return x; }
  Tensor call_multi(const std::vector<Tensor>& inputs, bool training) override;

 protected:
  void build_weights_multi(const std::vector<Shape>& input_shapes) override;
};

class Concatenate : public Layer {
 public:
  explicit Concatenate(int axis = -1, std::string name = "");
  std::string class_name() const override { return "Concatenate"; }
  Shape compute_output_shape_multi(const std::vector<Shape>& input_shapes) const override;
  Tensor call(const Tensor& x, bool training) override { return x; }
  Tensor call_multi(const std::vector<Tensor>& inputs, bool training) override;
  nlohmann::json get_config() const override;

 protected:
  void build_weights_multi(const std::vector<Shape>& input_shapes) override;

 private:
  int axis_;
};


}  // namespace layers

std::shared_ptr<layers::Conv2D> Conv2D(int64_t filters, int kernel_size, layers::Conv2D::Options options = {});
std::shared_ptr<layers::Conv2D> Conv2D(int64_t filters, std::array<int, 2> kernel_size, layers::Conv2D::Options options = {});
std::shared_ptr<layers::ZeroPadding2D> ZeroPadding2D(int padding, std::string name = "");
std::shared_ptr<layers::ZeroPadding2D> ZeroPadding2D(std::array<std::array<int, 2>, 2> padding, std::string name = "");
// strides 0: the pool size, as Keras's strides=None.
std::shared_ptr<layers::Pooling2D> MaxPooling2D(int pool_size = 2, int strides = 0, std::string padding = "valid",
                                                std::string name = "");
std::shared_ptr<layers::Pooling2D> AveragePooling2D(int pool_size = 2, int strides = 0, std::string padding = "valid",
                                                    std::string name = "");
std::shared_ptr<layers::GlobalAveragePooling2D> GlobalAveragePooling2D(std::string name = "");
std::shared_ptr<layers::GlobalMaxPooling2D> GlobalMaxPooling2D(std::string name = "");
std::shared_ptr<layers::Add> Add(std::string name = "");
std::shared_ptr<layers::Concatenate> Concatenate(int axis = -1, std::string name = "");

}  // namespace keel
