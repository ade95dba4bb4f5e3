// `keel train`'s validation and Keras callbacks: the flags, and the callbacks a run builds from its
// configuration (RUN/history.csv always; EarlyStopping and ReduceLROnPlateau when asked), with their
// state saved in every checkpoint so that `keel resume` goes on as if never stopped.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "framework/model/callbacks.h"
#include "tools/cli/run_config.h"

namespace keel::cli {

// --validation-split, --validation-data, --validation-freq, --early-stopping-*, --restore-best-weights,
// --reduce-lr-*.
void add_callback_options(po::options_description& d);
void apply_callback_options(const po::variables_map& vm, RunConfig& config);

class FitCallbacks {
 public:
  // `initial_epoch` < 0: a new run (history.csv starts empty); else a resume from that epoch: the
  // rows of that epoch and later (written before the checkpoint resumed from was) are dropped, so
  // the resumed run writes each epoch's row once. `state`: the checkpoint's train_state.callbacks.
  FitCallbacks(const RunConfig& config, const std::string& run_dir, int initial_epoch, const nlohmann::json& state,
               bool quiet);
  // The callbacks in the order fit must call them (all before the checkpoint callback).
  void add_to(FitOptions& fit);
  // The callbacks' state for the checkpoint (null when none keeps any).
  nlohmann::json state() const;
  // EarlyStopping stopped this run, in an earlier invocation (0-based epoch) or this one; -1 if not.
  int stopped_epoch() const { return early_stopping_ && early_stopping_->stopped_epoch() > 0 ? early_stopping_->stopped_epoch() : -1; }
  bool restores_best_weights() const { return early_stopping_ && early_stopping_->restores_weights(); }

 private:
  std::unique_ptr<CSVLogger> csv_;
  std::unique_ptr<EarlyStopping> early_stopping_;
  std::unique_ptr<ReduceLROnPlateau> reduce_lr_;
};

}  // namespace keel::cli
