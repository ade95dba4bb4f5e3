// Keras-style callbacks that keel's fit uses: the progress bar, and stopping after N steps.
#pragma once

#include <chrono>
#include <cstdio>

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

}  // namespace keel
