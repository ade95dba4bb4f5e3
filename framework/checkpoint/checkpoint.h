// Model checkpoints: one HDF5 file in Keras's legacy layout plus keel's training state (contract,
// DESIGN.md §4):
//
//   / attrs: keel_format_version, keras_version, backend="keel", model_config, training_config,
//            keel_config_crc32 (CRC-32 of model_config + '\0' + training_config)
//   /model_weights            attrs: layer_names, backend, keras_version
//     /<layer>                attrs: weight_names = ["<layer>/kernel:0", ...]
//       /<layer>/kernel:0     float32, Keras layout
//   /optimizer_weights        attrs: weight_names = ["Adam/iterations:0", "Adam/<layer>/kernel/m:0", ...]
//   /keel/train_state         JSON: step, epoch, data iterator position, seed, device, run config
//   every dataset             attrs: keel_crc32 (CRC-32 of its stored bytes; format 2)
//
// Loading checks everything (format, checksums, architecture, every shape, optimizer) before it writes
// a single value into the model, so a bad file never leaves a half-restored model.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "framework/checkpoint/checkpoint_error.h"
#include "framework/model/model.h"
#include "framework/train/optimizers.h"

namespace keel {

// 2: every dataset carries a checksum (h5_file.h), and the root a checksum of model_config and
// training_config (keel_config_crc32). Files of version 1 still load, unverified.
inline constexpr int64_t kCheckpointFormatVersion = 2;
inline constexpr int64_t kOldestCheckpointFormatVersion = 1;

// Where a run is: enough to continue it exactly.
struct TrainState {
  int64_t step = 0;              // optimizer iterations done
  int epoch = 0;                 // the epoch to continue (0-based)
  int64_t batch_in_epoch = 0;    // batches of `epoch` already done
  nlohmann::json iterator_state; // the data iterator's position in `epoch`; null at an epoch start
  StepTotals epoch_totals;       // running loss/accuracy sums of `epoch`
  nlohmann::json config;         // how the run was started (model, data, device, optimizer, seed...)
  nlohmann::json memory;         // what training measured so far, per core (tools/cli/memory_report.h);
                                 // null in checkpoints written before keel recorded it
  nlohmann::json callbacks;      // the callbacks' resumable state by name ({"EarlyStopping": {...}});
                                 // null when none kept any, and in checkpoints from before keel did
};

// write_checkpoint(path, snapshot_checkpoint(model, optimizer, state)) (checkpoint_snapshot.h).
void save_checkpoint(const std::string& path, const Model& model, const Optimizer& optimizer, const TrainState& state);
// Restores weights, optimizer slots and iterations; returns the training state.
TrainState load_checkpoint(const std::string& path, Model& model, Optimizer& optimizer);
// Only the model's weights, checked as load_checkpoint checks them; no optimizer state is read or
// built (evaluation: nothing of the optimizer occupies the cores). Returns the training state.
TrainState load_model_weights(const std::string& path, Model& model);

// Only the training state (to rebuild the model a checkpoint belongs to). Checks it is keel's.
TrainState read_train_state(const std::string& path);

// What verify_checkpoint found in a file that is whole.
struct CheckpointCheck {
  int64_t format_version = 0;
  bool checksummed = false;  // false: format 1, which predates checksums (it loads, unverified)
  int64_t datasets = 0;      // datasets read and checked
  TrainState state;
};
// Reads every dataset of the checkpoint at `path` and checks it against its checksum, and the format,
// the config checksum and the training state; throws CheckpointError naming the first damage. A
// file that passes loads (into the model it belongs to) without a damaged value.
CheckpointCheck verify_checkpoint(const std::string& path);

}  // namespace keel
