#include "framework/checkpoint/checkpoint_snapshot.h"

#include <stdexcept>

namespace keel {
namespace {

void copy_into(const Variable& v, SnapshotValue& into) {
  const Tensor& t = v.value();
  if (t.is_abstract()) throw std::logic_error("snapshot_checkpoint: variable '" + v.name() + "' has no storage (abstract)");
  into.name = v.name();
  into.shape = t.shape();
  into.values.assign(t.data(), t.data() + t.size());
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

void snapshot_checkpoint(const Model& model, const Optimizer& optimizer, const TrainState& state, CheckpointSnapshot& into) {
  into.model_config = model.to_config().dump();
  into.training_config =
      nlohmann::json{{"loss", model.loss().get_config()},
                     {"metrics", {"accuracy"}},
                     {"optimizer_config", {{"class_name", optimizer.name()}, {"config", optimizer.get_config()}}}}
          .dump();
  const std::vector<Layer*> layers = model.layers();
  into.layers.resize(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    SnapshotLayer& l = into.layers[i];
    l.name = layers[i]->name();
    const std::vector<Variable*> weights = layers[i]->weights();
    l.weights.resize(weights.size());
    for (size_t j = 0; j < weights.size(); ++j) copy_into(*weights[j], l.weights[j]);
  }
  into.optimizer_name = optimizer.name();
  into.iterations = optimizer.iterations();
  const std::vector<Variable*> slots = optimizer.slot_variables();
  into.slots.resize(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) copy_into(*slots[i], into.slots[i]);
  into.state = state;
}

CheckpointSnapshot snapshot_checkpoint(const Model& model, const Optimizer& optimizer, const TrainState& state) {
  CheckpointSnapshot s;
  snapshot_checkpoint(model, optimizer, state, s);
  return s;
}

}  // namespace keel
