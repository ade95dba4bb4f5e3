// What a checkpoint file holds, copied to host memory at a step boundary: every model variable,
// every optimizer slot, the iterations and the training state. A synchronous save writes it at once;
// an asynchronous one (async_checkpointer.h) hands it to a writer thread while training goes on.
// Either way the one writer, write_checkpoint, makes the file, so both give the same datasets and
// attributes, and, since the files hold no timestamps, the same bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/checkpoint/checkpoint.h"

namespace keel {

struct SnapshotValue {
  std::string name;          // the variable's name, "dense/kernel" or "Adam/dense/kernel/m"
  Shape shape;
  std::vector<float> values; // a copy, in the variable's (Keras) layout
};

struct SnapshotLayer {
  std::string name;                   // "dense"
  std::vector<SnapshotValue> weights; // the layer's weights, in Keras's order
};

struct CheckpointSnapshot {
  std::string model_config;     // JSON: Keras's to_json
  std::string training_config;  // JSON: loss, metrics, optimizer config
  std::vector<SnapshotLayer> layers;
  std::string optimizer_name;   // "Adam"
  int64_t iterations = 0;
  std::vector<SnapshotValue> slots;  // Keras's order (for Adam, every m, then every v)
  TrainState state;
  // Host memory the copied values take (the strings and the state's JSON aside).
  int64_t bytes() const;
};

// Copies everything save_checkpoint writes into `into`; the model and optimizer may change as soon as
// it returns. The values reuse `into`'s memory where it is large enough, so refilling a snapshot of
// the same model allocates nothing for them (and touches no fresh page).
void snapshot_checkpoint(const Model& model, const Optimizer& optimizer, const TrainState& state, CheckpointSnapshot& into);
// The same into a new snapshot.
CheckpointSnapshot snapshot_checkpoint(const Model& model, const Optimizer& optimizer, const TrainState& state);
// The optimizer part of the checkpoint at `path` (its name, iterations and every slot, verified)
// into `into`: with a snapshot of a model loaded by load_model_weights, a whole checkpoint again.
void read_optimizer_state(const std::string& path, CheckpointSnapshot& into);
// Writes the checkpoint file (checkpoint.h's layout) at `path`. Reads nothing but `snapshot`, so it
// may run on another thread while training goes on.
void write_checkpoint(const std::string& path, const CheckpointSnapshot& snapshot);

}  // namespace keel
