// Keras's ModelCheckpoint: a keel checkpoint written at the end of each epoch, or, with
// save_best_only, of each epoch whose `monitor` beat the best so far. Lives above framework/model
// because it writes checkpoints (framework/checkpoint/checkpoint.h).
#pragma once

#include <cstdio>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "framework/checkpoint/checkpoint.h"
#include "framework/model/callbacks.h"

namespace keel {

class ModelCheckpoint : public Callback {
 public:
  // Keras's arguments and defaults (save_weights_only and save_freq aside: keel writes the whole
  // checkpoint, once per epoch).
  struct Options {
    std::string monitor = "val_loss";
    int verbose = 0;
    bool save_best_only = false;
    std::string mode = "auto";  // "auto" | "min" | "max" (auto: max for a monitor holding "acc")
    std::optional<double> initial_value_threshold;  // the best to beat at first
  };
  // The training state a save records; the default records step and epoch (the epoch to continue).
  using StateFn = std::function<TrainState(const TrainingState&)>;

  // `filepath`: "{epoch}" in it becomes the 1-based epoch, as Keras formats it; its directory is
  // created if missing. Each file is replaced atomically and verified (replace_file,
  // verify_checkpoint). Messages go to `out` (nullptr: none).
  ModelCheckpoint(std::string filepath, Options options, std::FILE* out = stdout);
  void set_state_fn(StateFn fn) { state_fn_ = std::move(fn); }

  void on_train_begin(TrainingState& st) override;
  void on_epoch_end(TrainingState& st, const Logs& logs) override;

  // The best value saved so far (nullopt before the first save).
  std::optional<double> best() const { return best_; }
  // {"best": x or null}: a resumed run beats the same best as a straight one.
  nlohmann::json get_state() const;
  void set_state(const nlohmann::json& state);

 private:
  std::string path_for(int epoch) const;
  void save(TrainingState& st, const std::string& path);
  std::string filepath_;
  Options options_;
  std::FILE* out_;
  bool max_;
  std::optional<double> best_;
  bool restored_ = false;
  StateFn state_fn_;
};

}  // namespace keel
