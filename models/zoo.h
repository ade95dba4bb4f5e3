// The model zoo: models by name, built in the current scope (mirrored under a strategy).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "framework/model/model.h"

namespace keel::zoo {

struct ModelOptions {
  Shape input_shape;  // without batch; empty: the model's default
  int64_t classes = 10;
  bool include_top = true;   // ResNets: the avg_pool + predictions head
  std::string pooling;       // ResNets without top: "", "avg" or "max" (keras.applications' pooling)
};

struct ZooEntry {
  std::string name;         // "mlp"
  std::string description;  // one line for `keel models`
  Shape default_input_shape;
  std::function<std::unique_ptr<Model>(const ModelOptions&)> build;
};

const std::vector<ZooEntry>& models();
// std::invalid_argument listing the known names if `name` is unknown.
const ZooEntry& find(const std::string& name);
std::unique_ptr<Model> build(const std::string& name, ModelOptions options);

}  // namespace keel::zoo
