#include "models/zoo.h"

#include <stdexcept>

#include "framework/core/limits.h"

namespace keel::zoo {

std::unique_ptr<Model> build_mlp(const ModelOptions& options, int64_t hidden);
std::unique_ptr<Model> build_resnet(const std::string& name, const ModelOptions& options);

const std::vector<ZooEntry>& models() {
  static const std::vector<ZooEntry> entries = {
      {"mlp", "the seed's MLP: 784 -> Dense(128, relu) -> Dense(classes, softmax)", {784},
       [](const ModelOptions& o) { return build_mlp(o, 128); }},
      {"mlp-wide", "784 -> Dense(1024, relu) -> Dense(classes, softmax)", {784},
       [](const ModelOptions& o) { return build_mlp(o, 1024); }},
      {"resnet18", "ResNet18 (basic blocks, Keras naming), for fast CPU work", {32, 32, 1},
       [](const ModelOptions& o) { return build_resnet("resnet18", o); }},
      {"resnet34", "ResNet34 (basic blocks, Keras naming)", {32, 32, 1},
       [](const ModelOptions& o) { return build_resnet("resnet34", o); }},
      {"resnet50", "keras.applications.ResNet50 (v1), 25,636,712 params at 1000 classes", {224, 224, 3},
       [](const ModelOptions& o) { return build_resnet("resnet50", o); }},
      {"resnet101", "keras.applications.ResNet101 (v1)", {224, 224, 3},
       [](const ModelOptions& o) { return build_resnet("resnet101", o); }},
      {"resnet152", "keras.applications.ResNet152 (v1)", {224, 224, 3},
       [](const ModelOptions& o) { return build_resnet("resnet152", o); }},
  };
  return entries;
}

const ZooEntry& find(const std::string& name) {
  for (const ZooEntry& e : models()) {
    if (e.name == name) return e;
  }
  std::string known;
  for (const ZooEntry& e : models()) known += (known.empty() ? "" : ", ") + e.name;
  throw std::invalid_argument("unknown model '" + quote_untrusted(name) + "' (known: " + known + "; see `keel models`)");
}

std::unique_ptr<Model> build(const std::string& name, ModelOptions options) {
  const ZooEntry& entry = find(name);
  if (options.input_shape.empty()) options.input_shape = entry.default_input_shape;
  check_in_range("--classes", options.classes, 1, kMaxClasses);
  check_input_shape("the input shape", options.input_shape);
  return entry.build(options);
}

}  // namespace keel::zoo
