// `keel train` and `keel resume`: fit with checkpoints, preemption-safe.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "framework/data/data_error.h"
#include "framework/checkpoint/async_checkpointer.h"
#include "framework/checkpoint/checkpoint.h"
#include "framework/checkpoint/run_directory.h"
#include "framework/checkpoint/run_lock.h"
#include "framework/core/limits.h"
#include "framework/layers/initializers.h"
#include "framework/layers/layer.h"
#include "framework/model/callbacks.h"
#include "framework/model/planner.h"
#include "tools/cli/checkpoint_selection.h"
#include "tools/cli/commands.h"
#include "tools/cli/fit_callbacks.h"
#include "tools/cli/json_log.h"
#include "tools/cli/memory_report.h"
#include "tools/cli/data_sources.h"
#include "tools/cli/run_config.h"
#include "tools/cli/saver_options.h"
#include "tools/cli/stored_run.h"

namespace keel::cli {
namespace {

std::atomic<int> g_signal{0};

const std::vector<std::vector<float>> kNoWeights;

extern "C" void on_signal(int sig) {
  g_signal = sig;
  // A second signal ends the process the default way.
  std::signal(sig, SIG_DFL);
}

// What one invocation of `keel train`/`keel resume` does beside the run's configuration.
struct RunControl {
  int64_t stop_after_steps = 0;  // 0: train to the end
  bool quiet = false;
  bool sync_save = false;        // write each checkpoint in the step instead of in the background
  bool replace_previous_run = false;  // train --overwrite: move the previous run aside when training starts
  JsonlLogger* json_log = nullptr;    // --log-format jsonl
};

// Saves checkpoints at epoch ends, every N steps, after --stop-after-steps and on SIGINT/SIGTERM, and
// never a step whose loss or gradients were not finite. Each save snapshots the state at the step
// boundary; a writer thread writes it while training goes on (AsyncCheckpointer), or the step writes
// it (--sync-save). Either way the training thread's time in save() is its stall.
class CheckpointCallback : public Callback {
 public:
  CheckpointCallback(RunDirectory& dir, const RunConfig& config, const RunControl& control)
      : dir_(dir), config_(config), control_(control) {
    if (!control.sync_save) {
      async_ = std::make_unique<AsyncCheckpointer>(
          [this](const CheckpointSnapshot& snapshot) { save_to_run_directory(dir_, snapshot, config_.keep); });
    }
  }

  // The snapshot's host memory is taken (and its pages touched) here, once, rather than in the first
  // save's step; every save refills it.
  void on_train_begin(TrainingState& st) override {
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
    const bool stop_requested =
        (control_.stop_after_steps > 0 && steps_this_run_ >= control_.stop_after_steps) || g_signal != 0;
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
    s.config = config_.to_json();
    if (callbacks_ != nullptr) s.callbacks = callbacks_->state();
    Model& model = *st.model;
    s.memory = training_memory(model.strategy().ledger(), config_, steps_this_run_, memory_before_);
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

  RunDirectory& dir_;
  const RunConfig& config_;
  RunControl control_;
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

// After each epoch: the bytes infeed moved to the cores and how much of the step time the cores
// waited for the input pipeline; a warning when waiting dominates (tf.data's "input-bound").
class InfeedReport : public Callback {
 public:
  explicit InfeedReport(bool quiet) : quiet_(quiet) {}
  void on_epoch_begin(TrainingState&) override { skipped_at_begin_ = *skipped_records(); }
  void on_epoch_end(TrainingState& st, const Logs&) override {
    const double fraction = st.input_bound_fraction();
    if (!quiet_) {
      std::printf("  infeed: %s host->cores, %s between cores, waited for input %.1f%% of %.1fs of steps\n",
                  format_bytes(st.infeed_bytes).c_str(), format_bytes(st.collective_bytes).c_str(), 100.0 * fraction,
                  st.step_seconds);
    }
    // Records read again to rebuild a shuffle buffer on resume are counted again.
    if (const int64_t skipped = *skipped_records() - skipped_at_begin_; skipped > 0) {
      std::printf("  skipped %lld corrupt records/images this epoch (--skip-corrupt; see the messages above)\n",
                  static_cast<long long>(skipped));
    }
    if (fraction > kInputBoundFraction) {
      std::fprintf(stderr,
                   "keel train: warning: epoch %d is input-bound: the cores waited for input %.0f%% of the step time. "
                   "The input pipeline (decoding, resizing) cannot keep up; use more host threads, a cheaper image "
                   "format (PNG decodes faster than JPEG), or images already at the model's input size.\n",
                   st.epoch + 1, 100.0 * fraction);
    }
    std::fflush(stdout);
  }

 private:
  static constexpr double kInputBoundFraction = 0.2;
  bool quiet_;
  int64_t skipped_at_begin_ = 0;
};

po::options_description run_control_options() {
  po::options_description d("Run control");
  d.add_options()
      ("stop-after-steps", po::value<int64_t>(), "stop after N steps of this invocation with a checkpoint, as a preemption would")
      ("sync-save", po::bool_switch(), "write each checkpoint in the training step (default: snapshot it and write it in the background)")
      ("quiet", po::bool_switch(), "no progress output")
      ("log-format", po::value<std::string>()->default_value("text"),
       "text, or jsonl: stdout carries one JSON object per epoch (every history value) and a final one; "
       "everything else goes to stderr");
  return d;
}

RunControl run_control(const po::variables_map& vm) {
  RunControl c;
  if (vm.count("stop-after-steps")) {
    c.stop_after_steps = check_in_range("--stop-after-steps", vm["stop-after-steps"].as<int64_t>(), 0, kMaxSteps);
  }
  c.quiet = vm["quiet"].as<bool>();
  c.sync_save = vm["sync-save"].as<bool>();
  return c;
}

// A cosine schedule spans the whole run as first configured; resuming keeps its length.
void set_cosine_decay_steps(RunConfig& config, const Dataset& train) {
  if (config.lr_schedule != "cosine" || config.decay_steps != 0) return;
  int64_t steps = train.cardinality();
  if (steps < 0) {  // a file pipeline: count its examples
    const int64_t examples = file_examples_count(parse_dataset_source(config.dataset), "train");
    if (examples < 0) {
      throw UsageError("--lr-schedule cosine needs the number of steps per epoch, and " + config.dataset +
                       " does not say how many examples it holds (no dataset_info.json); export it with "
                       "`keel data export` or train with --lr-schedule constant");
    }
    steps = examples / config.global_batch();
  }
  config.decay_steps = static_cast<int64_t>(config.epochs) * std::max<int64_t>(steps, 1);
}

// Restores `resume_from` into `model` and sets where `fit` starts. False when the run has already
// trained config.epochs (after saying so).
// `memory` receives what training recorded so far (null in checkpoints from before keel did).
bool resume_from_checkpoint(const std::string& resume_from, const RunConfig& config, const RunDirectory& dir,
                            ReplicatedStrategy& strategy, Model& model, FitOptions& fit, nlohmann::json& memory,
                            nlohmann::json& callbacks) {
  TrainState state;
  {
    auto scope = strategy.scope();
    state = load_checkpoint(resume_from, model, model.optimizer());
  }
  memory = state.memory;
  callbacks = state.callbacks;
  fit.initial_epoch = state.epoch;
  fit.initial_iterator_state = state.iterator_state;
  fit.initial_epoch_totals = state.epoch_totals;
  const bool early_stopped = callbacks.is_object() && callbacks.contains("EarlyStopping") &&
                             callbacks["EarlyStopping"].value("stopped_epoch", 0) > 0;
  if (early_stopped) {
    const int stopped = callbacks["EarlyStopping"].value("stopped_epoch", 0);
    std::printf("%s: EarlyStopping stopped it after epoch %d (step %lld); nothing to do.\n", dir.dir().c_str(), stopped + 1,
                static_cast<long long>(state.step));
    return false;
  }
  if (state.epoch >= config.epochs) {
    std::printf("%s: already trained %d of %d epochs (step %lld); nothing to do.\n", dir.dir().c_str(), state.epoch,
                config.epochs, static_cast<long long>(state.step));
    return false;
  }
  std::printf("Resuming %s at step %lld (epoch %d, batch %lld)\n", resume_from.c_str(),
              static_cast<long long>(state.step), state.epoch + 1, static_cast<long long>(state.batch_in_epoch));
  return true;
}

// Routes SIGINT and SIGTERM to on_signal while it lives, then restores the previous handlers.
// `keel train` and `keel resume` install it first of all, so that a signal during the slow part
// before training (the plan, loading data, restoring a checkpoint) ends with a message, never with a
// silent kill.
class SignalHandlers {
 public:
  SignalHandlers() : old_int_(std::signal(SIGINT, on_signal)), old_term_(std::signal(SIGTERM, on_signal)) {}
  ~SignalHandlers() {
    std::signal(SIGINT, old_int_);
    std::signal(SIGTERM, old_term_);
  }
  SignalHandlers(const SignalHandlers&) = delete;
  SignalHandlers& operator=(const SignalHandlers&) = delete;

 private:
  using Handler = void (*)(int);
  Handler old_int_;
  Handler old_term_;
};

// A run stopped by TerminateOnNaN ends here: one line naming the step and the first non-finite
// variable (exit 4). The step was not saved, nor anything after the last finite step.
void throw_if_diverged(const TerminateOnNaN& terminate_on_nan, const RunDirectory& dir) {
  const std::optional<NonFiniteStep>& t = terminate_on_nan.terminated();
  if (!t) return;
  const std::optional<std::string> latest = dir.latest();
  throw TrainingDiverged("training diverged at " + t->describe() + "; nothing after step " +
                         std::to_string(t->step - 1) + " was saved (" +
                         (latest ? "newest checkpoint: " + *latest : "no checkpoint in " + dir.dir()) +
                         "); lower the learning rate (--lr) and start again with `keel train --overwrite`");
}

void print_outcome(const RunConfig& config, const RunDirectory& dir, const CheckpointCallback& checkpoints,
                   Model& model, const RunControl& control, int early_stopped_epoch) {
  const int64_t stop_after_steps = control.stop_after_steps;
  if (control.json_log) {
    const char* outcome = g_signal != 0                 ? "interrupted"
                          : checkpoints.stopped_early() ? "stopped"
                          : early_stopped_epoch >= 0    ? "early_stopping"
                                                        : "completed";
    control.json_log->end(outcome, model.optimizer().iterations(), dir.dir(), dir.latest().value_or(""));
  }
  if (g_signal != 0) {
    std::printf("Interrupted by signal %d: saved step %lld to %s; continue with `keel resume %s`.\n", g_signal.load(),
                static_cast<long long>(checkpoints.last_saved_step()), dir.dir().c_str(), dir.dir().c_str());
  } else if (checkpoints.stopped_early()) {
    std::printf("Stopped after %lld steps: saved step %lld to %s; continue with `keel resume %s`.\n",
                static_cast<long long>(stop_after_steps), static_cast<long long>(checkpoints.last_saved_step()),
                dir.dir().c_str(), dir.dir().c_str());
  } else if (early_stopped_epoch >= 0) {
    std::printf("Epoch %d: early stopping (step %lld); checkpoint in %s\n", early_stopped_epoch + 1,
                static_cast<long long>(model.optimizer().iterations()), dir.dir().c_str());
  } else {
    std::printf("Trained %d epochs (step %lld); checkpoint in %s\n", config.epochs,
                static_cast<long long>(model.optimizer().iterations()), dir.dir().c_str());
  }
  std::printf("%s\n", checkpoints.stall_report().c_str());
}

// A signal before the first step: this invocation trained and saved nothing. Ends the shell's way
// for a signal (128 + its number), after saying so.
int interrupted_before_training(const RunDirectory& dir, bool resuming) {
  const int sig = g_signal.load();
  if (resuming) {
    std::fprintf(stderr, "keel resume: interrupted by signal %d before the first step; %s is as it was: continue "
                 "with `keel resume %s`\n", sig, dir.dir().c_str(), dir.dir().c_str());
  } else {
    std::fprintf(stderr, "keel train: interrupted by signal %d before the first step; nothing was saved\n", sig);
  }
  return 128 + sig;
}

// A resumed run that had already finished (resume_from_checkpoint said so).
int nothing_to_do(const RunControl& control, Model& model, const RunDirectory& dir, const std::string& checkpoint) {
  if (control.json_log) control.json_log->end("nothing_to_do", model.optimizer().iterations(), dir.dir(), checkpoint);
  return kExitOk;
}

// Keras's optimizer.build(model.trainable_variables): a fresh run's slots (zeros) exist before its
// first step, as the first step would create them, so the checkpoint snapshot is sized up front.
// Then the device line, and the augmentation's.
void build_slots_and_print_device(const RunConfig& config, ReplicatedStrategy& strategy, Model& model) {
  {
    auto scope = strategy.scope();
    model.optimizer().build(model.trainable_variables());
  }
  const DeviceSpec& d = config.device;
  const std::string slice = d.hosts > 1 ? " (" + std::to_string(d.hosts) + " hosts x " + std::to_string(d.cores_per_host()) +
                                               ", simulated in this process)" : "";
  std::printf("Device %s: %d cores%s x %s HBM; global batch %lld (%lld per core)\n", d.name.c_str(), d.cores, slice.c_str(),
              d.has_budget() ? format_bytes(d.hbm_bytes_per_core).c_str() : "unbounded",
              static_cast<long long>(config.global_batch()), static_cast<long long>(config.batch_per_core));
  if (!config.augment.empty()) {
    std::printf("Augmenting each training example (--augment %s; evaluation and validation data are not)\n",
                config.augment.c_str());
  }
  std::fflush(stdout);
}

// Builds everything, restores `resume_from` if given, trains to config.epochs. Returns the exit status.
int run(RunConfig config, RunDirectory& dir, const StoredRun* resume_from, const RunControl& control) {
  check_step_fits(config);
  Dataset train = training_dataset(config);  // data errors before any model work
  set_cosine_decay_steps(config, train);
  if (g_signal != 0) return interrupted_before_training(dir, resume_from != nullptr);

  clear_session();
  set_random_seed(config.seed);
  ReplicatedStrategy strategy(config.device, strategy_options(config));
  std::unique_ptr<Model> model;
  {
    auto scope = strategy.scope();
    model = build_model(config);
    model->set_remat(config.remat);
    if (!resume_from) load_init_weights(config, *model);
  }
  FitOptions fit;
  fit.epochs = config.epochs;
  fit.validation_data = validation_dataset(config);
  fit.validation_freq = config.validation_freq;
  nlohmann::json memory_before;  // null: a new run, or a checkpoint from before keel recorded it
  nlohmann::json callbacks_state;
  std::vector<std::vector<float>> best_weights;  // EarlyStopping's, kept in the checkpoint
  if (resume_from) {
    check_model_matches(*resume_from, *model);
    if (!resume_from_checkpoint(resume_from->file, config, dir, strategy, *model, fit, memory_before, callbacks_state)) {
      return nothing_to_do(control, *model, dir, resume_from->file);
    }
    if (config.restore_best_weights) best_weights = read_best_weights(resume_from->file, *model);
  }
  if (g_signal != 0) return interrupted_before_training(dir, resume_from != nullptr);
  build_slots_and_print_device(config, strategy, *model);

  ProgbarLogger progbar(stdout);
  CheckpointCallback checkpoints(dir, config, control);
  checkpoints.record_memory_after(memory_before);
  InfeedReport infeed_report(control.quiet);
  TerminateOnNaN terminate_on_nan(control.quiet ? nullptr : stdout);
  if (!control.quiet) fit.callbacks.push_back(&progbar);
  fit.callbacks.push_back(&infeed_report);
  fit.callbacks.push_back(&terminate_on_nan);
  if (control.replace_previous_run) {  // --overwrite: only once the new run is ready to train
    std::printf("Moved the previous run in %s to %s\n", dir.dir().c_str(), dir.move_previous_run_aside().c_str());
  }
  FitCallbacks keras_callbacks(config, dir, resume_from ? fit.initial_epoch : -1, callbacks_state,
                               std::move(best_weights), control.quiet);
  keras_callbacks.add_to(fit);  // before the checkpoints, which record their state
  checkpoints.record_callbacks(&keras_callbacks);
  keras_callbacks.set_best_state([&checkpoints](const TrainingState& st) { return checkpoints.epoch_end_state(st); });
  fit.callbacks.push_back(&checkpoints);
  if (control.json_log) fit.callbacks.push_back(control.json_log);

  const History history = model->fit(train, fit);
  if (keras_callbacks.restores_best_weights() && !checkpoints.stopped_early() && !terminate_on_nan.terminated()) {
    checkpoints.save_final_weights(*model, fit.initial_epoch + static_cast<int>(history.epochs.size()));
  }
  checkpoints.finish();  // the save in flight completes, or its error ends the run
  throw_if_diverged(terminate_on_nan, dir);
  print_outcome(config, dir, checkpoints, *model, control, keras_callbacks.stopped_epoch());
  return kExitOk;
}

// `keel train` once its flags are parsed.
int start_run(const po::variables_map& vm, JsonlLogger* log) {
  RunConfig config;
  apply_model_options(vm, config);
  apply_device_options(vm, config);
  apply_saver_options(vm, config);
  apply_training_options(vm, config);
  apply_init_options(vm, config);
  apply_callback_options(vm, config);
  config.validate();
  if (!vm.count("checkpoint-dir")) throw UsageError("--checkpoint-dir is required (e.g. --checkpoint-dir checkpoints/mlp)");
  RunDirectory dir(vm["checkpoint-dir"].as<std::string>());
  const RunLock lock = RunLock::acquire(dir.dir());
  const bool previous_run = dir.holds_a_run();
  if (previous_run && !vm["overwrite"].as<bool>()) {
    throw UsageError(dir.dir() + " already holds a run; continue it with `keel resume " + dir.dir() +
                     "`, or pass --overwrite to start a new one there (the old one is moved aside, not deleted)");
  }
  RunControl control = run_control(vm);
  control.replace_previous_run = previous_run;
  control.json_log = log;
  return run(config, dir, nullptr, control);
}

// `keel resume` once its flags are parsed.
int resume_run(const po::variables_map& vm, JsonlLogger* log) {
  if (!vm.count("run-dir")) throw UsageError("keel resume needs a run directory, e.g. `keel resume checkpoints/mlp`");
  RunDirectory dir(vm["run-dir"].as<std::string>());
  if (!std::filesystem::is_directory(dir.dir())) throw UsageError("run directory " + dir.dir() + " does not exist");
  const RunLock lock = RunLock::acquire(dir.dir());
  const SelectedCheckpoint selected = select_checkpoint(dir, /*move_aside=*/true, "resume");
  const StoredRun stored = read_stored_run(selected.path);
  RunConfig config = stored.config;
  if (vm.count("epochs")) config.epochs = vm["epochs"].as<int>();
  if (vm.count("data-dir")) config.data_dir = vm["data-dir"].as<std::string>();
  if (vm.count("keep")) config.keep = vm["keep"].as<int>();
  if (vm.count("save-every-steps")) config.save_every_steps = vm["save-every-steps"].as<int64_t>();
  if (vm["skip-corrupt"].as<bool>()) config.skip_corrupt = true;
  apply_saver_options(vm, config);  // checkpoints hold whole variables: any sharding resumes any run
  config.validate();
  RunControl control = run_control(vm);
  control.json_log = log;
  return run(config, dir, &stored, control);
}

}  // namespace

int train_command(const std::vector<std::string>& args) {
  const SignalHandlers handlers;
  po::options_description model_opts("Model"), device_opts("Device"), training_opts("Training"),
      init_opts("Initial weights (fine-tuning)");
  add_model_options(model_opts);
  add_device_options(device_opts);
  add_saver_options(device_opts);
  add_training_options(training_opts);
  add_init_options(init_opts);
  po::options_description callback_opts("Validation and callbacks (Keras's)");
  add_callback_options(callback_opts);
  po::options_description d("Usage: keel train --model mlp --dataset fashion_mnist --device v3-8 --batch-per-core 16 "
                            "--epochs 10 --checkpoint-dir DIR [options]\n\nTrains a zoo model and checkpoints it.");
  d.add_options()("help,h", "this help")
      ("checkpoint-dir", po::value<std::string>(), "run directory for ckpt-<step>.h5 files and `latest` (required)")
      ("overwrite", po::bool_switch(), "start a new run in a directory that already holds one");
  d.add(model_opts).add(device_opts).add(training_opts).add(init_opts).add(callback_opts).add(run_control_options());
  po::variables_map vm = parse_args(args, d);
  if (vm.count("help")) {
    std::cout << d << "\n";
    return kExitOk;
  }
  return with_log_format(vm, "train", [&](JsonlLogger* log) { return start_run(vm, log); });
}

int resume_command(const std::vector<std::string>& args) {
  const SignalHandlers handlers;
  po::options_description d("Usage: keel resume RUN_DIR [--epochs N] [options]\n\n"
                            "Continues a run exactly from its newest checkpoint that verifies. --epochs is the new total.");
  d.add_options()("help,h", "this help")
      ("run-dir", po::value<std::string>(), "the run directory")
      ("epochs", po::value<int>(), "total number of epochs (default: the run's)")
      ("data-dir", po::value<std::string>(), "directory of the dataset files (default: the run's)")
      ("keep", po::value<int>(), "checkpoints to keep")
      ("save-every-steps", po::value<int64_t>(), "also save every N steps")
      ("skip-corrupt", po::bool_switch(), "tfrecord:/images: from now on skip (and count) corrupt records and images");
  add_saver_options(d);
  d.add(run_control_options());
  po::positional_options_description pos;
  pos.add("run-dir", 1);
  po::variables_map vm = parse_args(args, d, &pos);
  if (vm.count("help")) {
    std::cout << d << "\n";
    return kExitOk;
  }
  return with_log_format(vm, "resume", [&](JsonlLogger* log) { return resume_run(vm, log); });
}

}  // namespace keel::cli
