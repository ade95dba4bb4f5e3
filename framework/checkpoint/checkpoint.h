// Model checkpoints: one HDF5 file in Keras's legacy layout plus keel's training state (contract,
// DESIGN.md §4):
//
//   / attrs: keel_format_version, keras_version, backend="keel", model_config, training_config
//   /model_weights            attrs: layer_names, backend, keras_version
//     /<layer>                attrs: weight_names = ["<layer>/kernel:0", ...]
//       /<layer>/kernel:0     float32, Keras layout
//   /optimizer_weights        attrs: weight_names = ["Adam/iterations:0", "Adam/<layer>/kernel/m:0", ...]
//   /keel/train_state         JSON: step, epoch, data iterator position, seed, device, run config
//
// Loading checks everything (format, architecture, every shape, optimizer) before it writes a single
// value into the model, so a bad file never leaves a half-restored model.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "framework/checkpoint/checkpoint_error.h"
#include "framework/model/model.h"
#include "framework/train/optimizers.h"

namespace keel {

inline constexpr int64_t kCheckpointFormatVersion = 1;

// Where a run is: enough to continue it exactly.
struct TrainState {
  int64_t step = 0;              // optimizer iterations done
  int epoch = 0;                 // the epoch to continue (0-based)
  int64_t batch_in_epoch = 0;    // batches of `epoch` already done
  nlohmann::json iterator_state; // the data iterator's position in `epoch`; null at an epoch start
  StepTotals epoch_totals;       // running loss/accuracy sums of `epoch`
  nlohmann::json config;         // how the run was started (model, data, device, optimizer, seed...)
};

// write_checkpoint(path, snapshot_checkpoint(model, optimizer, state)) (checkpoint_snapshot.h).
void save_checkpoint(const std::string& path, const Model& model, const Optimizer& optimizer, const TrainState& state);
// Restores weights, optimizer slots and iterations; returns the training state.
TrainState load_checkpoint(const std::string& path, Model& model, Optimizer& optimizer);
// Only the training state (to rebuild the model a checkpoint belongs to). Checks it is keel's.
TrainState read_train_state(const std::string& path);

}  // namespace keel
