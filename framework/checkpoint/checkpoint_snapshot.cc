#include "framework/checkpoint/checkpoint_snapshot.h"

#include <stdexcept>

namespace keel {
namespace {

SnapshotValue copy_of(const Variable& v) {
  const Tensor& t = v.value();
  if (t.is_abstract()) throw std::logic_error("snapshot_checkpoint: variable '" + v.name() + "' has no storage (abstract)");
  return SnapshotValue{v.name(), t.shape(), std::vector<float>(t.data(), t.data() + t.size())};
}

}  // namespace

int64_t CheckpointSnapshot::bytes() const {
  int64_t n = 0;
  for (const SnapshotLayer& layer : layers) {
    for (const SnapshotValue& w : layer.weights) n += static_cast<int64_t>(w.values.size() * sizeof(float));
  }
  for (const SnapshotValue& s : slots) n += static_cast<int64_t>(s.values.size() * sizeof(float));
  return n;
}

CheckpointSnapshot snapshot_checkpoint(const Model& model, const Optimizer& optimizer, const TrainState& state) {
  CheckpointSnapshot s;
  s.model_config = model.to_config().dump();
  s.training_config =
      nlohmann::json{{"loss", model.loss().get_config()},
                     {"metrics", {"accuracy"}},
                     {"optimizer_config", {{"class_name", optimizer.name()}, {"config", optimizer.get_config()}}}}
          .dump();
  for (Layer* layer : model.layers()) {
    SnapshotLayer& l = s.layers.emplace_back();
    l.name = layer->name();
    for (Variable* v : layer->weights()) l.weights.push_back(copy_of(*v));
  }
  s.optimizer_name = optimizer.name();
  s.iterations = optimizer.iterations();
  for (Variable* slot : optimizer.slot_variables()) s.slots.push_back(copy_of(*slot));
  s.state = state;
  return s;
}

}  // namespace keel
