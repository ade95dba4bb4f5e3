// ResNet v1 as keras.applications builds it (resnet.py: ResNet, block1, stack1): the same layer names
// (conv1_pad, conv1_conv, conv1_bn, conv1_relu, pool1_pad, pool1_pool, conv2_block1_0_conv, ...,
// avg_pool, predictions), conv biases, BatchNormalization epsilon 1.001e-5, and the stride on each
// stage's first 1x1 convolution. ResNet18/34 use basic blocks (two 3x3 convs) with the same naming
// scheme; their first stage keeps the identity shortcut, as in He et al. and torchvision.
#include <stdexcept>

#include "framework/layers/conv_layers.h"
#include "framework/layers/core_layers.h"
#include "framework/layers/normalization.h"
#include "framework/model/functional.h"
#include "models/zoo.h"

namespace keel::zoo {
namespace {

constexpr float kBnEpsilon = 1.001e-5f;

KerasTensor conv(const KerasTensor& x, int64_t filters, int kernel, int stride, const std::string& padding,
                 const std::string& name) {
  layers::Conv2D::Options o;
  o.strides = {stride, stride};
  o.padding = padding;
  o.name = name;
  return (*keel::Conv2D(filters, kernel, o))(x);
}

KerasTensor bn(const KerasTensor& x, const std::string& name) {
  return (*keel::BatchNormalization(0.99f, kBnEpsilon, name))(x);
}

KerasTensor relu(const KerasTensor& x, const std::string& name) {
  return (*std::make_shared<layers::Activation>("relu", name))(x);
}

// block1: the bottleneck (1x1, 3x3, 1x1 with 4x filters).
KerasTensor bottleneck(const KerasTensor& x, int64_t filters, int stride, bool conv_shortcut, const std::string& name) {
  KerasTensor shortcut = x;
  if (conv_shortcut) {
    shortcut = conv(x, 4 * filters, 1, stride, "valid", name + "_0_conv");
    shortcut = bn(shortcut, name + "_0_bn");
  }
  KerasTensor y = conv(x, filters, 1, stride, "valid", name + "_1_conv");
  y = relu(bn(y, name + "_1_bn"), name + "_1_relu");
  y = conv(y, filters, 3, 1, "same", name + "_2_conv");
  y = relu(bn(y, name + "_2_bn"), name + "_2_relu");
  y = conv(y, 4 * filters, 1, 1, "valid", name + "_3_conv");
  y = bn(y, name + "_3_bn");
  y = (*keel::Add(name + "_add"))({shortcut, y});
  return relu(y, name + "_out");
}

// The basic block (3x3, 3x3), named like block1.
KerasTensor basic(const KerasTensor& x, int64_t filters, int stride, bool conv_shortcut, const std::string& name) {
  KerasTensor shortcut = x;
  if (conv_shortcut) {
    shortcut = conv(x, filters, 1, stride, "valid", name + "_0_conv");
    shortcut = bn(shortcut, name + "_0_bn");
  }
  KerasTensor y = conv(x, filters, 3, stride, "same", name + "_1_conv");
  y = relu(bn(y, name + "_1_bn"), name + "_1_relu");
  y = conv(y, filters, 3, 1, "same", name + "_2_conv");
  y = bn(y, name + "_2_bn");
  y = (*keel::Add(name + "_add"))({shortcut, y});
  return relu(y, name + "_out");
}

struct Stage {
  int64_t filters;
  int blocks;
};

std::unique_ptr<Model> resnet(const std::string& model_name, const std::vector<Stage>& stages, bool bottleneck_blocks,
                              const ModelOptions& options) {
  const Shape& in = options.input_shape;
  if (in.size() != 3) {
    throw std::invalid_argument(model_name + " expects --input-shape HxWxC, got " + shape_string(in));
  }
  if (in[0] < 32 || in[1] < 32) {
    throw std::invalid_argument(model_name + " needs inputs of at least 32x32 (as Keras requires), got " +
                                std::to_string(in[0]) + "x" + std::to_string(in[1]));
  }
  if (options.classes <= 0) throw std::invalid_argument("--classes must be positive");
  KerasTensor input = Input(in);
  KerasTensor x = (*keel::ZeroPadding2D({{{3, 3}, {3, 3}}}, "conv1_pad"))(input);
  x = conv(x, 64, 7, 2, "valid", "conv1_conv");
  x = relu(bn(x, "conv1_bn"), "conv1_relu");
  x = (*keel::ZeroPadding2D({{{1, 1}, {1, 1}}}, "pool1_pad"))(x);
  x = (*keel::MaxPooling2D(3, 2, "valid", "pool1_pool"))(x);
  int64_t channels = 64;
  for (size_t s = 0; s < stages.size(); ++s) {
    const std::string stage = "conv" + std::to_string(s + 2);
    const int stride = s == 0 ? 1 : 2;
    for (int b = 1; b <= stages[s].blocks; ++b) {
      const std::string name = stage + "_block" + std::to_string(b);
      const int block_stride = b == 1 ? stride : 1;
      if (bottleneck_blocks) {
        x = bottleneck(x, stages[s].filters, block_stride, b == 1, name);
        channels = 4 * stages[s].filters;
      } else {
        const bool projection = b == 1 && (block_stride != 1 || channels != stages[s].filters);
        x = basic(x, stages[s].filters, block_stride, projection, name);
        channels = stages[s].filters;
      }
    }
  }
  if (options.include_top) {
    x = (*keel::GlobalAveragePooling2D("avg_pool"))(x);
    layers::Dense::Options d;
    d.activation = "softmax";
    d.name = "predictions";
    x = (*keel::Dense(options.classes, d))(x);
  } else if (options.pooling == "avg") {
    x = (*keel::GlobalAveragePooling2D("avg_pool"))(x);
  } else if (options.pooling == "max") {
    x = (*keel::GlobalMaxPooling2D("max_pool"))(x);
  } else if (!options.pooling.empty()) {
    throw std::invalid_argument("pooling must be \"avg\", \"max\" or empty, got \"" + options.pooling + "\"");
  }
  return std::make_unique<Functional>(input, x, model_name);
}

}  // namespace

std::unique_ptr<Model> build_resnet(const std::string& name, const ModelOptions& options) {
  if (name == "resnet18") return resnet(name, {{64, 2}, {128, 2}, {256, 2}, {512, 2}}, false, options);
  if (name == "resnet34") return resnet(name, {{64, 3}, {128, 4}, {256, 6}, {512, 3}}, false, options);
  if (name == "resnet50") return resnet(name, {{64, 3}, {128, 4}, {256, 6}, {512, 3}}, true, options);
  if (name == "resnet101") return resnet(name, {{64, 3}, {128, 4}, {256, 23}, {512, 3}}, true, options);
  if (name == "resnet152") return resnet(name, {{64, 3}, {128, 8}, {256, 36}, {512, 3}}, true, options);
  throw std::invalid_argument("unknown ResNet '" + name + "'");
}

}  // namespace keel::zoo
