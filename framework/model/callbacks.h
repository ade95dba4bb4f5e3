// Keras-style callbacks that keel's fit uses: the progress bar, and stopping a diverging run.
#pragma once

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "framework/model/model.h"

namespace keel {

// Keras's ProgbarLogger: "468/468 [=====] - 3s 6ms/step - loss: 0.51 - accuracy: 0.82". Redrawn in
// place on a terminal; one plain line per epoch otherwise (logs, CI).
class ProgbarLogger : public Callback {
 public:
  explicit ProgbarLogger(std::FILE* out = stdout);
  void on_epoch_begin(TrainingState& st) override;
  void on_train_batch_end(TrainingState& st, const Logs& logs) override;
  void on_epoch_end(TrainingState& st, const Logs& logs) override;

 private:
  void draw(const TrainingState& st, const Logs& logs, bool final);
  std::FILE* out_;
  bool tty_;
  std::chrono::steady_clock::time_point epoch_start_;
  std::chrono::steady_clock::time_point last_draw_;
  int64_t first_batch_ = 0;  // batches already done when this epoch's timing started (resume)
};

// Keras's TerminateOnNaN: at the end of a batch whose loss is NaN or infinite it prints
// "Batch 2: Invalid loss, terminating training" and stops training. keel also stops on a batch whose
// gradients were not finite (TrainingState::non_finite; the optimizer skipped that update), and says
// which step and which variable. terminated() tells the caller where it stopped; such a step is
// never one to save (the CLI's checkpoints skip it and `keel train` exits with status 4).
class TerminateOnNaN : public Callback {
 public:
  // Messages go to `out` (nullptr: silent).
  explicit TerminateOnNaN(std::FILE* out = stdout) : out_(out) {}
  void on_train_batch_end(TrainingState& st, const Logs& logs) override;
  // The step training stopped at, or nullopt while every step has been finite.
  const std::optional<NonFiniteStep>& terminated() const { return terminated_; }

 private:
  std::FILE* out_;
  std::optional<NonFiniteStep> terminated_;
};

}  // namespace keel

namespace keel {

// Keras's CSVLogger: one row per epoch, columns "epoch" then the logs' keys sorted (fixed by the
// first row written; a key missing from a later epoch is written "NA"). append=false truncates the
// file at on_train_begin; append=true adds rows, with the header only when the file is empty.
// Values are written in the shortest form that reads back to the same double; lines end in "\n".
class CSVLogger : public Callback {
 public:
  explicit CSVLogger(std::string filename, std::string separator = ",", bool append = false);
  void on_train_begin(TrainingState& st) override;
  void on_epoch_end(TrainingState& st, const Logs& logs) override;

 private:
  std::string filename_;
  std::string separator_;
  bool append_;
  std::vector<std::string> keys_;  // read back from the header when appending to a file that has one
};

// Keras's `mode="auto"`: "max" for a monitor whose name holds "acc" (accuracy), else "min".
bool monitor_is_max(const std::string& monitor, const std::string& mode);

// Keras's EarlyStopping: stops training when `monitor` has not improved by more than min_delta for
// `patience` epochs (an epoch improves on the best so far; the wait restarts only when it also beats
// `baseline`). restore_best_weights: at the end of training the model gets the weights of the best
// epoch. get_state()/set_state() carry wait, best, best epoch and stopped epoch across a resume; the
// best weights are kept in memory only (a resumed run restores them only if its own epochs hold the best).
class EarlyStopping : public Callback {
 public:
  struct Options {
    std::string monitor = "val_loss";
    double min_delta = 0.0;
    int patience = 0;
    std::string mode = "auto";  // "auto" | "min" | "max"
    std::optional<double> baseline;
    bool restore_best_weights = false;
  };
  explicit EarlyStopping(Options options);
  void on_train_begin(TrainingState& st) override;
  void on_epoch_end(TrainingState& st, const Logs& logs) override;
  void on_train_end(TrainingState& st) override;
  int stopped_epoch() const { return stopped_epoch_; }  // 0-based; 0 while not stopped (Keras)
  int best_epoch() const { return best_epoch_; }
  bool restores_weights() const { return options_.restore_best_weights; }
  std::optional<double> best() const { return best_; }
  int wait() const { return wait_; }
  nlohmann::json get_state() const;
  void set_state(const nlohmann::json& state);

 private:
  bool is_improvement(double value, double reference) const;
  Options options_;
  bool max_;
  int wait_ = 0;
  int stopped_epoch_ = 0;
  std::optional<double> best_;
  int best_epoch_ = 0;
  std::vector<std::vector<float>> best_weights_;  // host copies, in model.variables() order
  bool restored_ = false;             // set_state() before on_train_begin: keep that state
  bool stopped_this_run_ = false;
};

// Keras's ReduceLROnPlateau: multiplies the optimizer's learning rate by `factor` (not below
// min_lr) when `monitor` has not improved by more than min_delta for `patience` epochs, then waits
// `cooldown` epochs before counting again. The rate is the optimizer's (Optimizer::set_learning_rate);
// an optimizer with a schedule is refused. get_state()/set_state() carry wait, cooldown, best and
// the current rate across a resume.
class ReduceLROnPlateau : public Callback {
 public:
  struct Options {
    std::string monitor = "val_loss";
    double factor = 0.1;
    int patience = 10;
    std::string mode = "auto";
    double min_delta = 1e-4;
    int cooldown = 0;
    double min_lr = 0.0;
  };
  // Messages ("Epoch 3: ReduceLROnPlateau reducing learning rate to 0.0001.") go to `out` (nullptr: silent).
  explicit ReduceLROnPlateau(Options options, std::FILE* out = nullptr);
  void on_train_begin(TrainingState& st) override;
  void on_epoch_end(TrainingState& st, const Logs& logs) override;
  int wait() const { return wait_; }
  int cooldown_counter() const { return cooldown_counter_; }
  double best() const { return best_; }
  nlohmann::json get_state() const;
  // Also sets the optimizer's rate, once fit starts (on_train_begin).
  void set_state(const nlohmann::json& state);

 private:
  bool improved(double current) const;
  Options options_;
  std::FILE* out_;
  bool max_;
  int wait_ = 0;
  int cooldown_counter_ = 0;
  double best_ = 0.0;
  std::optional<float> learning_rate_;  // from set_state, applied at on_train_begin
  bool restored_ = false;
};

}  // namespace keel
