// Keras's TensorBoard callback (update_freq="epoch"): event files that TensorBoard opens, written
// with keel's TFRecord writer (datasets/tfrecord.h) and the Event/Summary messages of
// datasets/tensorboard_event.proto (TensorFlow's field numbers).
//
//   <log_dir>/train/events.out.tfevents.<seconds>.<host>.<pid>.<n>.v2
//   <log_dir>/validation/events.out.tfevents.<seconds>.<host>.<pid>.<n>.v2
//
// Each file starts with an Event {wall_time, step 0, file_version "brain.Event:2"}. At the end of each
// epoch one Event {wall_time, step = epoch (0-based), summary} per directory holds scalars by Keras's
// tags: "epoch_<name>" for every train value of the logs (the validation file: every "val_<name>"
// value as "epoch_<name>"), "epoch_learning_rate" (the optimizer's rate for the next step), and, per
// core and category, "epoch_hbm_peak_bytes/core_<c>/<category>" and ".../total": the core's
// high-water marks in the HBM ledger of this process so far. Values are float32 (simple_value).
//
// A new TensorBoard (a resumed run) writes new files and never rewrites old ones; epochs whose
// scalars the existing files of `log_dir` already hold (a run that stopped after writing them but
// before its checkpoint) are not written again.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/model/callbacks.h"

namespace keel {

class TensorBoard : public Callback {
 public:
  explicit TensorBoard(std::string log_dir = "logs");
  ~TensorBoard() override;
  TensorBoard(const TensorBoard&) = delete;
  TensorBoard& operator=(const TensorBoard&) = delete;

  void on_train_begin(TrainingState& st) override;
  void on_epoch_end(TrainingState& st, const Logs& logs) override;
  void on_train_end(TrainingState& st) override;

  // The highest epoch whose scalars `log_dir`'s files held when training began (-1: none).
  int64_t last_written_epoch() const { return last_written_; }

 private:
  class Writer;
  Writer& writer(const std::string& name);
  std::string log_dir_;
  std::unique_ptr<Writer> train_;
  std::unique_ptr<Writer> validation_;
  int64_t last_written_ = -1;
};

// Every Event's step and its scalars, by tag, read back from the event files under `dir` (one run's
// train/ or validation/ directory), in file-name order. For TensorBoard's own duplicate check and for
// tests. A torn record (a crash while writing) ends its file; DataError on a record that is not an Event.
struct EventScalars {
  int64_t step = 0;
  double wall_time = 0.0;
  std::string file_version;  // set on a file's first event
  std::vector<std::pair<std::string, float>> scalars;
};
std::vector<EventScalars> read_event_files(const std::string& dir);

}  // namespace keel
