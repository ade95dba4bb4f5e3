// `keel train`/`keel resume`: what one invocation does beside the run's configuration (RunControl),
// and the callback that checkpoints the run (CheckpointCallback). Included by train_command.cc only.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/checkpoint/async_checkpointer.h"
#include "framework/checkpoint/checkpoint.h"
#include "framework/checkpoint/run_directory.h"
#include "framework/device/process_group.h"
#include "framework/model/callbacks.h"
#include "tools/cli/fit_callbacks.h"
#include "tools/cli/json_log.h"
#include "tools/cli/memory_report.h"
#include "tools/cli/run_config.h"

namespace keel::cli {

// Several processes: after a step each process's host copy of a sharded variable is current in
// its own cores' shards only — Adam's slots (unsharded too on one machine: each process updates its
// cores' shards and shares only the parameters, ReplicatedStrategy::updates_slice_shards), the
// parameters too with --shard full (the next forward gathers those, layer by layer). Every process gathers them
// whole where whole variables are read: a checkpoint, and an epoch's end, before EarlyStopping keeps
// its best weights and ModelCheckpoint writes best.h5. Once per step: every process asks at the same
// points, so every process takes part in the same gathers. Rank 0 writes.
class GatherShardedState : public Callback {
 public:
  explicit GatherShardedState(const ProcessGroup* processes) : processes_(processes) {}
  void on_epoch_end(TrainingState& st, const Logs&) override { gather(*st.model); }
  void gather(Model& model) {
    const ShardingMode shard = model.strategy().shard();
    const int64_t step = model.optimizer().iterations();
    if (processes_ == nullptr || processes_->size() == 1 || step == gathered_at_) return;
    if (!model.strategy().updates_slice_shards()) return;  // every process's copy is whole
    std::vector<Tensor> values;
    for (Variable* v : model.optimizer().slot_variables()) values.push_back(v->value());
    if (shard == ShardingMode::full) {
      for (Variable* v : model.variables()) values.push_back(v->value());
    }
    const int64_t sent = processes_->sent_bytes(), received = processes_->received_bytes();
    model.strategy().gather_sharded_state(values);
    sent_bytes_ += processes_->sent_bytes() - sent;
    received_bytes_ += processes_->received_bytes() - received;
    gathered_at_ = step;
  }
  // What the gathers moved between processes (not part of any step's traffic).
  int64_t sent_bytes() const { return sent_bytes_; }
  int64_t received_bytes() const { return received_bytes_; }

 private:
  const ProcessGroup* processes_;
  int64_t gathered_at_ = -1;
  int64_t sent_bytes_ = 0;
  int64_t received_bytes_ = 0;
};

// The signal (SIGINT, SIGTERM) that asked this run to stop, 0 if none.
inline std::atomic<int> g_signal{0};

inline const std::vector<std::vector<float>> kNoWeights;

// What one invocation of `keel train`/`keel resume` does beside the run's configuration.
struct RunControl {
  int64_t stop_after_steps = 0;  // 0: train to the end
  bool quiet = false;
  bool sync_save = false;        // write each checkpoint in the step instead of in the background
  bool replace_previous_run = false;  // train --overwrite: move the previous run aside when training starts
  JsonlLogger* json_log = nullptr;    // --log-format jsonl
  // mpirun: the processes sharing the slice (null in one process). They agree at each step boundary
  // whether to stop; rank 0 alone writes the run directory.
  ProcessGroup* processes = nullptr;
  bool writes_files() const { return processes == nullptr || processes->is_chief(); }
};

// Saves checkpoints at epoch ends, every N steps, after --stop-after-steps and on SIGINT/SIGTERM, and
// never a step whose loss or gradients were not finite. Each save snapshots the state at the step
// boundary; a writer thread writes it while training goes on (AsyncCheckpointer), or the step writes
// it (--sync-save). Either way the training thread's time in save() is its stall.
class CheckpointCallback : public Callback {
 public:
  // The epoch-end gather of sharded state, for fit's callbacks ahead of those reading whole variables.
  Callback* gather_sharded_state() { return &gather_; }
  const GatherShardedState& state_gathers() const { return gather_; }
  CheckpointCallback(RunDirectory& dir, const RunConfig& config, const RunControl& control)
      : dir_(dir), config_(config), control_(control), gather_(control.processes) {
    if (!control.sync_save && control.writes_files()) {
      async_ = std::make_unique<AsyncCheckpointer>(
          [this](const CheckpointSnapshot& snapshot) { save_to_run_directory(dir_, snapshot, config_.keep); });
    }
  }

  // The snapshot's host memory is taken (and its pages touched) here, once, rather than in the first
  // save's step; every save refills it.
  void on_train_begin(TrainingState& st) override {
    st.model->strategy().watch_signal(&g_signal);
    if (!control_.writes_files()) return;
    CheckpointSnapshot& snapshot = buffer();
    snapshot_checkpoint(*st.model, st.model->optimizer(), TrainState{}, snapshot);
    snapshot_bytes_ = snapshot.bytes();
    if (!control_.quiet) {
      std::printf("  checkpoint snapshot: %s of host memory, %s\n", format_bytes(snapshot_bytes_).c_str(),
                  async_ ? "written in the background (--sync-save: in the step)" : "written in the step (--sync-save)");
    }
  }

  void on_train_batch_end(TrainingState& st, const Logs&) override {
    ++steps_this_run_;
    const int64_t step = st.model->optimizer().iterations();
    // A signal reaches the processes at different moments: they stop together, after the first step
    // whose totals' exchange carried it from any of them (ReplicatedStrategy::watch_signal).
    const bool signalled = control_.processes != nullptr ? st.model->strategy().signalled_anywhere() : g_signal != 0;
    const bool stop_requested = (control_.stop_after_steps > 0 && steps_this_run_ >= control_.stop_after_steps) || signalled;
    const bool periodic = config_.save_every_steps > 0 && step % config_.save_every_steps == 0;
    if (stop_requested) {
      st.stop_training = true;
      stopped_early_ = true;
    }
    // The last batch of an epoch is saved by on_epoch_end, as the start of the next epoch.
    const bool epoch_done = st.last_batch_of_epoch;
    if ((stop_requested || periodic) && !epoch_done) {
      TrainState s;
      s.step = step;
      s.epoch = st.epoch;
      s.batch_in_epoch = st.batch;
      s.iterator_state = st.iterator_state();
      s.epoch_totals = st.epoch_totals;
      save(st, s);
    }
  }

  void on_epoch_end(TrainingState& st, const Logs&) override {
    // A pipeline of unknown size that held less than one global batch: nothing to save, and a
    // checkpoint of an empty epoch could not be resumed.
    if (st.batch == 0) {
      throw UsageError("the training data gave no full global batch of " + std::to_string(config_.global_batch()) +
                       " examples in epoch " + std::to_string(st.epoch + 1) +
                       " (it holds fewer); use a smaller --batch-per-core or fewer cores");
    }
    TrainState s;
    s.step = st.model->optimizer().iterations();
    s.epoch = st.epoch + 1;
    save(st, s);
  }

  // What each save records of the other callbacks (EarlyStopping, ReduceLROnPlateau).
  void record_callbacks(const FitCallbacks* callbacks) { callbacks_ = callbacks; }
  // Saves the state at the end of `epoch` again: EarlyStopping restored the best epoch's weights.
  void save_final_weights(Model& model, int epochs_done) {
    TrainingState st;
    st.model = &model;
    TrainState s;
    s.step = model.optimizer().iterations();
    s.epoch = epochs_done;
    last_saved_ = -1;
    save(st, s);
  }
  // What the save at the end of `st`'s epoch records beside the weights (RUN/best.h5 records the same).
  TrainState epoch_end_state(const TrainingState& st) const {
    TrainState s;
    s.step = st.model->optimizer().iterations();
    s.epoch = st.epoch + 1;
    s.config = config_.to_json();
    if (callbacks_ != nullptr) s.callbacks = callbacks_->state();
    s.memory = training_memory(st.model->strategy().ledger(), config_, steps_this_run_, memory_before_);
    return s;
  }
  // Each checkpoint records what training measured: `before` (the resumed checkpoint's record) and
  // this invocation's ledger (tools/cli/memory_report.h).
  void record_memory_after(nlohmann::json before) { memory_before_ = std::move(before); }
  // Waits for the save in flight; rethrows its error.
  void finish() {
    if (async_) async_->wait();
  }
  bool stopped_early() const { return stopped_early_; }
  int64_t last_saved_step() const { return last_saved_; }
  int64_t steps_this_run() const { return steps_this_run_; }
  // "Checkpoint saves: 3, training stalled 2.1 ms per save (asynchronous; snapshot 1.16 MiB; 0.0 ms
  // of it waiting for the save before)": the training thread's time inside save(), per save.
  std::string stall_report() const {
    const double per_save = saves_ ? 1000.0 / static_cast<double>(saves_) : 0.0;
    char line[256];
    std::snprintf(line, sizeof line, "Checkpoint saves: %lld, training stalled %.1f ms per save (%s; snapshot %s",
                  static_cast<long long>(saves_), per_save * stall_seconds_,
                  async_ ? "asynchronous" : "synchronous, --sync-save", format_bytes(snapshot_bytes_).c_str());
    std::string text = line;
    if (async_) {
      std::snprintf(line, sizeof line, "; %.1f ms of it waiting for the save before", per_save * wait_seconds_);
      text += line;
    }
    return text + ")";
  }

 private:
  void save(TrainingState& st, TrainState& s) {
    if (s.step == last_saved_ || st.non_finite) return;
    const auto start = std::chrono::steady_clock::now();
    Model& model = *st.model;
    gather_.gather(model);
    s.memory = training_memory(model.strategy().ledger(), config_, steps_this_run_, memory_before_);
    if (control_.processes != nullptr) gather_core_records(s.memory, model.strategy(), *control_.processes);
    if (!control_.writes_files()) {
      last_saved_ = s.step;
      return;
    }
    s.config = config_.to_json();
    if (callbacks_ != nullptr) s.callbacks = callbacks_->state();
    CheckpointSnapshot& snapshot = buffer();  // async: once the save before is written, or its error
    wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    snapshot_checkpoint(model, model.optimizer(), s, snapshot);
    snapshot_best_weights(model, callbacks_ != nullptr ? callbacks_->best_weights() : kNoWeights, snapshot);
    // The values leave the cores for host memory (mirrored: core 0's copy).
    model.strategy().ledger().core(0).record_core_to_host(snapshot.bytes());
    if (async_) {
      async_->save();
    } else {
      save_to_run_directory(dir_, snapshot, config_.keep);
    }
    stall_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++saves_;
    last_saved_ = s.step;
  }

  CheckpointSnapshot& buffer() { return async_ ? async_->next() : sync_buffer_; }

  // Several processes: each measured its own cores; the checkpoint records every core's figures.
  static void gather_core_records(nlohmann::json& memory, const ReplicatedStrategy& strategy, ProcessGroup& processes) {
    nlohmann::json& per_core = memory["per_core"];
    const int cores = strategy.local_replicas();
    for (int p = 0; p < processes.size(); ++p) {
      nlohmann::json part = nlohmann::json::array();
      if (p == processes.rank()) {
        for (int c = 0; c < cores; ++c) part.push_back(per_core[static_cast<size_t>(p * cores + c)]);
      }
      part = nlohmann::json::parse(processes.broadcast_string(part.dump(), p));
      for (int c = 0; c < cores; ++c) per_core[static_cast<size_t>(p * cores + c)] = part.at(static_cast<size_t>(c));
    }
  }

  RunDirectory& dir_;
  const RunConfig& config_;
  RunControl control_;
  GatherShardedState gather_;
  const FitCallbacks* callbacks_ = nullptr;
  int64_t steps_this_run_ = 0;
  int64_t last_saved_ = -1;
  bool stopped_early_ = false;
  nlohmann::json memory_before_;
  int64_t saves_ = 0;
  double stall_seconds_ = 0.0;
  double wait_seconds_ = 0.0;  // of stall_seconds_: waiting for the save in flight
  int64_t snapshot_bytes_ = 0;
  CheckpointSnapshot sync_buffer_;
  std::unique_ptr<AsyncCheckpointer> async_;  // last: its destructor lets a save in flight finish first
};

}  // namespace keel::cli
