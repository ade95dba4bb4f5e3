#include "models/zoo.h"

#include <stdexcept>

namespace keel::zoo {

std::unique_ptr<Model> build_mlp(const ModelOptions& options, int64_t hidden);

const std::vector<ZooEntry>& models() {
  static const std::vector<ZooEntry> entries = {
      {"mlp", "the seed's MLP: 784 -> Dense(128, relu) -> Dense(classes, softmax)", {784},
       [](const ModelOptions& o) { return build_mlp(o, 128); }},
      {"mlp-wide", "784 -> Dense(1024, relu) -> Dense(classes, softmax)", {784},
       [](const ModelOptions& o) { return build_mlp(o, 1024); }},
  };
  return entries;
}

const ZooEntry& find(const std::string& name) {
  for (const ZooEntry& e : models()) {
    if (e.name == name) return e;
  }
  std::string known;
  for (const ZooEntry& e : models()) known += (known.empty() ? "" : ", ") + e.name;
  throw std::invalid_argument("unknown model '" + name + "' (known: " + known + "; see `keel models`)");
}

std::unique_ptr<Model> build(const std::string& name, ModelOptions options) {
  const ZooEntry& entry = find(name);
  if (options.input_shape.empty()) options.input_shape = entry.default_input_shape;
  if (options.classes <= 0) {
    throw std::invalid_argument("--classes must be positive, got " + std::to_string(options.classes));
  }
  for (int64_t d : options.input_shape) {
    if (d <= 0) throw std::invalid_argument("input shape " + shape_string(options.input_shape) + " must be positive");
  }
  return entry.build(options);
}

}  // namespace keel::zoo
