// Keras-style callbacks that keel's fit uses: the progress bar, and stopping a diverging run.
#pragma once

#include <chrono>
#include <cstdio>
#include <optional>

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
