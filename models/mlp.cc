// The seed's MLPs: Flatten → Dense(hidden, relu) → Dense(classes, softmax).
#include "framework/layers/core_layers.h"
#include "models/zoo.h"

namespace keel::zoo {

std::unique_ptr<Model> build_mlp(const ModelOptions& options, int64_t hidden) {
  // Images arrive as (28, 28) or (H, W, C); a flat (784,) input needs no Flatten, as in the seed.
  std::vector<LayerPtr> layers;
  Shape in = options.input_shape;
  if (in.size() > 1) {
    layers.push_back(keel::Flatten(in));
    layers.push_back(keel::Dense(hidden, "relu"));
  } else {
    layers.push_back(keel::Dense(hidden, "relu", in));
  }
  layers.push_back(keel::Dense(options.classes, "softmax"));
  return std::make_unique<Sequential>(std::move(layers));
}

}  // namespace keel::zoo
