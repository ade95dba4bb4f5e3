// `keel train`'s validation and Keras callbacks: the flags, and the callbacks a run builds from its
// configuration (RUN/history.csv always; EarlyStopping, ReduceLROnPlateau, ModelCheckpoint writing
// RUN/best.h5 and TensorBoard writing RUN/logs when asked), with their state saved in every checkpoint
// so that `keel resume` goes on as if never stopped.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "datasets/tensorboard.h"
#include "framework/checkpoint/model_checkpoint.h"
#include "framework/checkpoint/run_directory.h"
#include "framework/model/callbacks.h"
#include "tools/cli/run_config.h"

namespace keel::cli {

// --validation-split, --validation-data, --validation-freq, --early-stopping-*, --restore-best-weights,
// --reduce-lr-*, --save-best-only, --checkpoint-monitor, --tensorboard.
void add_callback_options(po::options_description& d);
void apply_callback_options(const po::variables_map& vm, RunConfig& config);

class FitCallbacks {
 public:
  // `initial_epoch` < 0: a new run (history.csv starts empty); else a resume from that epoch: the
  // rows of that epoch and later (written before the checkpoint resumed from was) are dropped, so
  // the resumed run writes each epoch's row once (TensorBoard, reading its files, never writes an
  // epoch twice either). A new run starts with no history.csv and no logs/.
  // `state`: the checkpoint's train_state.callbacks; `best_weights`: its EarlyStopping best weights.
  // `writes_files` false (the processes of an mpirun job but rank 0): no history.csv, best.h5 or
  // logs/ — rank 0 writes them; the callbacks that decide (EarlyStopping, ReduceLROnPlateau) run
  // everywhere, on the same logs, so every process decides alike.
  FitCallbacks(const RunConfig& config, const RunDirectory& dir, int initial_epoch, const nlohmann::json& state,
               std::vector<std::vector<float>> best_weights, bool quiet, bool writes_files = true);
  // The callbacks in the order fit must call them (all before the checkpoint callback).
  void add_to(FitOptions& fit);
  // The callbacks' state for the checkpoint (null when none keeps any).
  nlohmann::json state() const;
  // EarlyStopping's best epoch's weights, to keep in each checkpoint (empty when not restoring them).
  const std::vector<std::vector<float>>& best_weights() const;
  // What RUN/best.h5 records beside the weights (the run's configuration, for `keel evaluate`).
  void set_best_state(ModelCheckpoint::StateFn fn) {
    if (best_) best_->set_state_fn(std::move(fn));
  }
  // TensorBoard's per-core HBM peaks come from the run's ledger.
  TensorBoard* tensorboard() { return tensorboard_.get(); }
  // EarlyStopping stopped this run, in an earlier invocation (0-based epoch) or this one; -1 if not.
  int stopped_epoch() const { return early_stopping_ && early_stopping_->stopped_epoch() > 0 ? early_stopping_->stopped_epoch() : -1; }
  bool restores_best_weights() const { return early_stopping_ && early_stopping_->restores_weights(); }

 private:
  std::unique_ptr<CSVLogger> csv_;
  std::unique_ptr<EarlyStopping> early_stopping_;
  std::unique_ptr<ReduceLROnPlateau> reduce_lr_;
  std::unique_ptr<ModelCheckpoint> best_;
  std::unique_ptr<TensorBoard> tensorboard_;
};

}  // namespace keel::cli
