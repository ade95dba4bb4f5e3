// `keel train` and `keel resume`: fit with checkpoints, preemption-safe.
#include <cstdlib>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "framework/data/data_error.h"
#include "framework/checkpoint/async_checkpointer.h"
#include "framework/checkpoint/checkpoint.h"
#include "framework/checkpoint/run_directory.h"
#include "framework/checkpoint/run_lock.h"
#include "framework/core/host_threads.h"
#include "framework/core/limits.h"
#include "framework/device/process_group.h"
#include "framework/layers/initializers.h"
#include "framework/layers/layer.h"
#include "framework/model/callbacks.h"
#include "framework/model/planner.h"
#include "tools/cli/checkpoint_selection.h"
#include "tools/cli/checkpoint_callback.h"
#include "tools/cli/commands.h"
#include "tools/cli/fit_callbacks.h"
#include "tools/cli/json_log.h"
#include "tools/cli/memory_report.h"
#include "tools/cli/data_sources.h"
#include "tools/cli/run_config.h"
#include "tools/cli/saver_options.h"
#include "tools/cli/signal_watch.h"
#include "tools/cli/stored_run.h"

namespace keel::cli {
namespace {

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
  add_host_options(d);
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

// What crossed processes in this invocation, per process and per step, beside the all-reduce's
// minimum: each process sends and receives 2 (P-1)/P of the gradients' bytes per step. The gathers
// of sharded state before checkpoints (GatherShardedState) are not steps' traffic: left out here.
// Where the parameters are one copy in shared memory, the all-gather half of that minimum is not
// moved at all (only the first step's exchange counts).
void print_process_traffic(ProcessGroup& processes, int64_t steps, Model& model, const GatherShardedState& gathers) {
  constexpr size_t kFields = 4;  // sent, received, sums from the gradient arena, the optimizer's shared sums
  const int64_t mine[kFields] = {processes.sent_bytes() - gathers.sent_bytes(), processes.received_bytes() - gathers.received_bytes(),
                                 processes.sums_from_arena(), processes.shared_sums()};
  std::vector<int64_t> all(kFields * static_cast<size_t>(processes.size()));
  processes.all_gather_bytes(mine, sizeof mine, all.data());
  int64_t gradient_bytes = 0;
  for (const Variable* v : model.trainable_variables()) gradient_bytes += v->value().bytes();
  const int p = processes.size();
  const double minimum = 2.0 * (p - 1) / p * static_cast<double>(gradient_bytes);
  std::printf("Across %d processes (MPI), %lld steps: per process and step, sent / received (all-reduce minimum %s):\n", p,
              static_cast<long long>(steps), format_bytes(static_cast<int64_t>(minimum)).c_str());
  for (int r = 0; r < p && steps > 0; ++r) {
    const int64_t sent = all[kFields * static_cast<size_t>(r)] / steps, received = all[kFields * static_cast<size_t>(r) + 1] / steps;
    std::printf("  process %d: %s / %s (%.2fx / %.2fx the minimum)\n", r, format_bytes(sent).c_str(),
                format_bytes(received).c_str(), static_cast<double>(sent) / minimum, static_cast<double>(received) / minimum);
  }
  if (processes.parameters_shared()) {
    std::printf("  parameters: one copy in this machine's shared memory, each process updating its shards in place\n");
  }
  // Where every process's backward wrote its gradients where the others sum them: the fewest times
  // any process did, of the most all-reduces any made.
  int64_t from_arena = all[2], sums = all[3];
  for (size_t r = 1; r < static_cast<size_t>(p); ++r) {
    from_arena = std::min(from_arena, all[kFields * r + 2]);
    sums = std::max(sums, all[kFields * r + 3]);
  }
  if (from_arena > 0) {
    std::printf("  gradients: written by backward straight into shared memory in %lld of the optimizer's %lld all-reduces "
                "(every process)\n",
                static_cast<long long>(from_arena), static_cast<long long>(sums));
  }
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
  if (control.processes != nullptr) print_process_traffic(*control.processes, checkpoints.steps_this_run(), model, checkpoints.state_gathers());
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

// With --layout: which variables are split across the cores, and along which axis.
void print_laid_out(const Model& model) {
  std::string names;
  int count = 0;
  for (const Variable* v : model.variables()) {
    if (v->sharded_axis() < 0) continue;
    if (++count <= 8) names += (count > 1 ? ", " : "") + v->name() + " (axis " + std::to_string(v->sharded_axis()) + ")";
  }
  if (count == 0) return;
  std::printf("Split across the cores by --layout: %s%s\n", names.c_str(), count > 8 ? (" and " + std::to_string(count - 8) + " more").c_str() : "");
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
  const ProcessGroup* processes = strategy.processes();
  const std::string where = processes == nullptr ? ", simulated in this process"
                                                 : ", " + std::to_string(processes->size()) + " processes of " +
                                                       std::to_string(strategy.local_replicas()) + " cores";
  const std::string slice = d.hosts > 1 ? " (" + std::to_string(d.hosts) + " hosts x " + std::to_string(d.cores_per_host()) +
                                               where + ")" : "";
  std::printf("Device %s: %d cores%s x %s HBM; global batch %lld (%lld per core)\n", d.name.c_str(), d.cores, slice.c_str(),
              d.has_budget() ? format_bytes(d.hbm_bytes_per_core).c_str() : "unbounded",
              static_cast<long long>(config.global_batch()), static_cast<long long>(config.batch_per_core));
  if (!config.augment.empty()) {
    std::printf("Augmenting each training example (--augment %s; evaluation and validation data are not)\n",
                config.augment.c_str());
  }
  print_laid_out(model);
  std::fflush(stdout);
}

// The run's strategy: its savers, and the processes sharing the slice under mpirun.
ReplicatedStrategy::Options run_strategy_options(const RunConfig& config, const RunControl& control) {
  ReplicatedStrategy::Options options = strategy_options(config);
  options.processes = control.processes;
  return options;
}

// This process's share of the training input: under mpirun, its replicas' rows of every global batch
// (KEEL_PER_HOST_INPUT=0: every row, as before keel decoded per host; for benchmarks).
TrainingInput training_input(const RunConfig& config, const RunControl& control) {
  TrainingInput share;
  const char* per_host = std::getenv("KEEL_PER_HOST_INPUT");
  if (control.processes != nullptr && !(per_host != nullptr && std::string(per_host) == "0")) {
    share.input_context =
        input_context(config.device, control.processes->size(), control.processes->rank(), config.global_batch());
  }
  return share;
}

// A run saved in mid-epoch before keel decoded per host has a file pipeline whose decode map was
// unkeyed: rebuilt that way (every process decoding every example) so that its iterator state restores.
void match_saved_pipeline(const RunConfig& config, const FitOptions& fit, TrainingInput share, Dataset& train) {
  const nlohmann::json& state = fit.initial_iterator_state;
  if (!state.is_object() || !state.contains("pipeline") || !state["pipeline"].is_string()) return;
  if (state["pipeline"].get<std::string>() == train.describe()) return;
  share.keyed_decode = false;
  Dataset legacy = training_dataset(config, share);
  if (state["pipeline"].get<std::string>() == legacy.describe()) train = std::move(legacy);
}

// Builds everything, restores `resume_from` if given, trains to config.epochs. Returns the exit status.
int run(RunConfig config, RunDirectory& dir, const StoredRun* resume_from, const RunControl& control) {
  check_step_fits(config);
  const TrainingInput input = training_input(config, control);
  Dataset train = training_dataset(config, input);  // data errors before any model work
  set_cosine_decay_steps(config, train);
  if (g_signal != 0) return interrupted_before_training(dir, resume_from != nullptr);
  clear_session();
  set_random_seed(config.seed);
  ReplicatedStrategy strategy(config.device, run_strategy_options(config, control));
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
    match_saved_pipeline(config, fit, input, train);
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
  if (control.replace_previous_run && control.writes_files()) {  // --overwrite: once the new run is ready to train
    std::printf("Moved the previous run in %s to %s\n", dir.dir().c_str(), dir.move_previous_run_aside().c_str());
  }
  fit.callbacks.push_back(checkpoints.gather_sharded_state());  // before the callbacks reading whole variables
  FitCallbacks keras_callbacks(config, dir, resume_from ? fit.initial_epoch : -1, callbacks_state,
                               std::move(best_weights), control.quiet, control.writes_files());
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

// Under mpirun with several processes: the group, once the slice is known to split into equal
// power-of-two blocks of cores (exit 2 naming the process counts that work). Null in one process.
ProcessGroup* slice_processes(const RunConfig& config) {
  if (!ProcessGroup::launched_by_mpirun()) return nullptr;
  ProcessGroup& world = ProcessGroup::world();
  if (world.size() == 1) return nullptr;
  const ProcessShare share = config.device.share(world.size(), world.rank());
  if ((share.cores & (share.cores - 1)) != 0) {
    throw UsageError(std::to_string(world.size()) + " processes would run " + std::to_string(share.cores) + " cores each on " +
                     config.device.name + "; each process must run a power-of-two number of cores (so that the sums are "
                     "the same bits as in one process): start fewer or more processes");
  }
  return &world;
}

// Under mpirun, rank 0 says so when the launcher bound it to fewer CPUs than its share of the machine
// (framework/core/host_threads.h): the other ranks are bound alike, and their output is discarded.
void note_cpu_binding(const ProcessGroup* processes) {
  if (processes != nullptr && !processes->is_chief()) return;
  if (const std::string note = cpu_binding_note(); !note.empty()) std::fprintf(stderr, "keel: note: %s\n", note.c_str());
}

// Rank 0 holds the run directory's lock for the whole job; the other processes only read it.
std::optional<RunLock> lock_unless_helper(const RunDirectory& dir, const ProcessGroup* processes) {
  if (processes != nullptr && !processes->is_chief()) return std::nullopt;
  return RunLock::acquire(dir.dir());
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
  ProcessGroup* processes = slice_processes(config);
  note_cpu_binding(processes);
  const std::optional<RunLock> lock = lock_unless_helper(dir, processes);
  const bool previous_run = dir.holds_a_run();
  if (previous_run && !vm["overwrite"].as<bool>()) {
    throw UsageError(dir.dir() + " already holds a run; continue it with `keel resume " + dir.dir() +
                     "`, or pass --overwrite to start a new one there (the old one is moved aside, not deleted)");
  }
  RunControl control = run_control(vm);
  control.replace_previous_run = previous_run;
  control.json_log = log;
  control.processes = processes;
  return run(config, dir, nullptr, control);
}

// `keel resume` once its flags are parsed.
int resume_run(const po::variables_map& vm, JsonlLogger* log) {
  if (!vm.count("run-dir")) throw UsageError("keel resume needs a run directory, e.g. `keel resume checkpoints/mlp`");
  RunDirectory dir(vm["run-dir"].as<std::string>());
  if (!std::filesystem::is_directory(dir.dir())) throw UsageError("run directory " + dir.dir() + " does not exist");
  ProcessGroup* group = ProcessGroup::launched_by_mpirun() ? &ProcessGroup::world() : nullptr;
  note_cpu_binding(group);
  const std::optional<RunLock> lock = lock_unless_helper(dir, group);
  // Rank 0 picks the checkpoint (moving aside any that fail to verify); the others read the same one.
  std::string path;
  if (group == nullptr || group->is_chief()) path = select_checkpoint(dir, /*move_aside=*/true, "resume").path;
  if (group != nullptr) path = group->broadcast_string(path, 0);
  const StoredRun stored = read_stored_run(path);
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
  control.processes = slice_processes(config);
  return run(config, dir, &stored, control);
}

}  // namespace

int train_command(const std::vector<std::string>& args) {
  const SignalWatch signals(&g_signal);  // first of all: before any other thread starts
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
  apply_host_options(vm);
  return with_log_format(vm, "train", [&](JsonlLogger* log) { return start_run(vm, log); });
}

int resume_command(const std::vector<std::string>& args) {
  const SignalWatch signals(&g_signal);  // first of all: before any other thread starts
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
  apply_host_options(vm);
  return with_log_format(vm, "resume", [&](JsonlLogger* log) { return resume_run(vm, log); });
}

}  // namespace keel::cli
