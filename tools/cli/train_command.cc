// `keel train` and `keel resume`: fit with checkpoints, preemption-safe.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "framework/data/data_error.h"
#include "framework/checkpoint/checkpoint.h"
#include "framework/checkpoint/run_directory.h"
#include "framework/core/limits.h"
#include "framework/layers/initializers.h"
#include "framework/layers/layer.h"
#include "framework/model/callbacks.h"
#include "framework/model/planner.h"
#include "tools/cli/commands.h"
#include "tools/cli/data_sources.h"
#include "tools/cli/run_config.h"
#include "tools/cli/stored_run.h"

namespace keel::cli {
namespace {

std::atomic<int> g_signal{0};

extern "C" void on_signal(int sig) {
  g_signal = sig;
  // A second signal ends the process the default way.
  std::signal(sig, SIG_DFL);
}

// Saves checkpoints at epoch ends, every N steps, after --stop-after-steps and on SIGINT/SIGTERM.
class CheckpointCallback : public Callback {
 public:
  CheckpointCallback(RunDirectory& dir, const RunConfig& config, int64_t stop_after_steps)
      : dir_(dir), config_(config), stop_after_steps_(stop_after_steps) {}

  void on_train_batch_end(TrainingState& st, const Logs&) override {
    ++steps_this_run_;
    const int64_t step = st.model->optimizer().iterations();
    const bool stop_requested = (stop_after_steps_ > 0 && steps_this_run_ >= stop_after_steps_) || g_signal != 0;
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

  bool stopped_early() const { return stopped_early_; }
  int64_t last_saved_step() const { return last_saved_; }

 private:
  void save(TrainingState& st, TrainState& s) {
    if (s.step == last_saved_) return;
    s.config = config_.to_json();
    Model& model = *st.model;
    dir_.save(s.step, [&](const std::string& tmp) { save_checkpoint(tmp, model, model.optimizer(), s); }, config_.keep);
    last_saved_ = s.step;
  }

  RunDirectory& dir_;
  const RunConfig& config_;
  int64_t stop_after_steps_;
  int64_t steps_this_run_ = 0;
  int64_t last_saved_ = -1;
  bool stopped_early_ = false;
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
      ("quiet", po::bool_switch(), "no progress output");
  return d;
}

int64_t stop_after_steps(const po::variables_map& vm) {
  if (!vm.count("stop-after-steps")) return 0;
  return check_in_range("--stop-after-steps", vm["stop-after-steps"].as<int64_t>(), 0, kMaxSteps);
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
bool resume_from_checkpoint(const std::string& resume_from, const RunConfig& config, const RunDirectory& dir,
                            ReplicatedStrategy& strategy, Model& model, FitOptions& fit) {
  TrainState state;
  {
    auto scope = strategy.scope();
    state = load_checkpoint(resume_from, model, model.optimizer());
  }
  fit.initial_epoch = state.epoch;
  fit.initial_iterator_state = state.iterator_state;
  fit.initial_epoch_totals = state.epoch_totals;
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

void print_outcome(const RunConfig& config, const RunDirectory& dir, const CheckpointCallback& checkpoints,
                   Model& model, int64_t stop_after_steps) {
  if (g_signal != 0) {
    std::printf("Interrupted by signal %d: saved step %lld to %s; continue with `keel resume %s`.\n", g_signal.load(),
                static_cast<long long>(checkpoints.last_saved_step()), dir.dir().c_str(), dir.dir().c_str());
  } else if (checkpoints.stopped_early()) {
    std::printf("Stopped after %lld steps: saved step %lld to %s; continue with `keel resume %s`.\n",
                static_cast<long long>(stop_after_steps), static_cast<long long>(checkpoints.last_saved_step()),
                dir.dir().c_str(), dir.dir().c_str());
  } else {
    std::printf("Trained %d epochs (step %lld); checkpoint in %s\n", config.epochs,
                static_cast<long long>(model.optimizer().iterations()), dir.dir().c_str());
  }
}

// This host's physical memory: the budget of a device without HBM (the `cpu` preset).
int64_t host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return INT64_MAX;
  return static_cast<int64_t>(pages) * page;
}

// Before any data or weight exists: the training step, planned on abstract tensors through the same
// code path (framework/model/planner.h), must fit every core's HBM — the ledger's own report (exit 3)
// otherwise — or, on a device without a budget, this host's memory. A model or batch too large thus
// ends before anything is allocated, never after gigabytes were.
void check_step_fits(const RunConfig& config) {
  const ModelFactory factory = model_factory(config);
  if (config.device.has_budget()) {
    check_training_step_fits(factory, config.device, config.batch_per_core, label_shape(config));
    return;
  }
  const MemoryPlan plan = plan_training_step(factory, config.device, config.batch_per_core, label_shape(config));
  const int64_t host = host_memory_bytes();
  for (const CoreMemory& m : plan.per_core) {
    if (m.peak <= host) continue;
    throw ResourceExhausted(m.core, m.peak,
                            "Resource exhausted: one training step of " + config.model + " at " +
                                std::to_string(config.batch_per_core) + " per core needs " + format_bytes(m.peak) +
                                " on core " + std::to_string(m.core) + ", more than this host's " + format_bytes(host) +
                                " of memory (device " + config.device.name + " has no HBM budget). Nothing was "
                                "allocated. Reduce --batch-per-core (see `keel memory`).");
  }
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

// Builds everything, restores `resume_from` if given, trains to config.epochs. Returns the exit status.
int run(RunConfig config, RunDirectory& dir, const StoredRun* resume_from, int64_t stop_after_steps, bool quiet) {
  check_step_fits(config);
  Dataset train = training_dataset(config);  // data errors before any model work
  set_cosine_decay_steps(config, train);
  if (g_signal != 0) return interrupted_before_training(dir, resume_from != nullptr);

  clear_session();
  set_random_seed(config.seed);
  ReplicatedStrategy strategy(config.device);
  std::unique_ptr<Model> model;
  {
    auto scope = strategy.scope();
    model = build_model(config);
  }
  FitOptions fit;
  fit.epochs = config.epochs;
  if (resume_from) {
    check_model_matches(*resume_from, *model);
    if (!resume_from_checkpoint(resume_from->file, config, dir, strategy, *model, fit)) return kExitOk;
  }
  if (g_signal != 0) return interrupted_before_training(dir, resume_from != nullptr);
  std::printf("Device %s: %d cores x %s HBM; global batch %lld (%lld per core)\n", config.device.name.c_str(),
              config.device.cores, config.device.has_budget() ? format_bytes(config.device.hbm_bytes_per_core).c_str() : "unbounded",
              static_cast<long long>(config.global_batch()), static_cast<long long>(config.batch_per_core));
  std::fflush(stdout);

  ProgbarLogger progbar(stdout);
  CheckpointCallback checkpoints(dir, config, stop_after_steps);
  InfeedReport infeed_report(quiet);
  if (!quiet) fit.callbacks.push_back(&progbar);
  fit.callbacks.push_back(&infeed_report);
  fit.callbacks.push_back(&checkpoints);

  model->fit(train, fit);
  print_outcome(config, dir, checkpoints, *model, stop_after_steps);
  return kExitOk;
}

}  // namespace

int train_command(const std::vector<std::string>& args) {
  const SignalHandlers handlers;
  po::options_description model_opts("Model"), device_opts("Device"), training_opts("Training");
  add_model_options(model_opts);
  add_device_options(device_opts);
  add_training_options(training_opts);
  po::options_description d("Usage: keel train --model mlp --dataset fashion_mnist --device v3-8 --batch-per-core 16 "
                            "--epochs 10 --checkpoint-dir DIR [options]\n\nTrains a zoo model and checkpoints it.");
  d.add_options()("help,h", "this help")
      ("checkpoint-dir", po::value<std::string>(), "run directory for ckpt-<step>.h5 files and `latest` (required)")
      ("overwrite", po::bool_switch(), "start a new run in a directory that already holds one");
  d.add(model_opts).add(device_opts).add(training_opts).add(run_control_options());
  po::variables_map vm = parse_args(args, d);
  if (vm.count("help")) {
    std::cout << d << "\n";
    return kExitOk;
  }
  RunConfig config;
  apply_model_options(vm, config);
  apply_device_options(vm, config);
  apply_training_options(vm, config);
  config.validate();
  if (!vm.count("checkpoint-dir")) throw UsageError("--checkpoint-dir is required (e.g. --checkpoint-dir checkpoints/mlp)");
  RunDirectory dir(vm["checkpoint-dir"].as<std::string>());
  if (auto latest = dir.latest(); latest && !vm["overwrite"].as<bool>()) {
    throw UsageError(dir.dir() + " already holds a run (" + *latest + "); continue it with `keel resume " + dir.dir() +
                     "`, or pass --overwrite to start a new one there");
  }
  return run(config, dir, nullptr, stop_after_steps(vm), vm["quiet"].as<bool>());
}

int resume_command(const std::vector<std::string>& args) {
  const SignalHandlers handlers;
  po::options_description d("Usage: keel resume RUN_DIR [--epochs N] [options]\n\n"
                            "Continues a run exactly from its latest checkpoint. --epochs is the new total.");
  d.add_options()("help,h", "this help")
      ("run-dir", po::value<std::string>(), "the run directory")
      ("epochs", po::value<int>(), "total number of epochs (default: the run's)")
      ("data-dir", po::value<std::string>(), "directory of the dataset files (default: the run's)")
      ("keep", po::value<int>(), "checkpoints to keep")
      ("save-every-steps", po::value<int64_t>(), "also save every N steps")
      ("skip-corrupt", po::bool_switch(), "tfrecord:/images: from now on skip (and count) corrupt records and images");
  d.add(run_control_options());
  po::positional_options_description pos;
  pos.add("run-dir", 1);
  po::variables_map vm = parse_args(args, d, &pos);
  if (vm.count("help")) {
    std::cout << d << "\n";
    return kExitOk;
  }
  if (!vm.count("run-dir")) throw UsageError("keel resume needs a run directory, e.g. `keel resume checkpoints/mlp`");
  RunDirectory dir(vm["run-dir"].as<std::string>());
  if (!std::filesystem::is_directory(dir.dir())) throw UsageError("run directory " + dir.dir() + " does not exist");
  std::optional<std::string> latest = dir.latest();
  if (!latest) throw UsageError(dir.dir() + " holds no checkpoint to resume (no `latest`); start one with `keel train`");
  const StoredRun stored = read_stored_run(*latest);
  RunConfig config = stored.config;
  if (vm.count("epochs")) config.epochs = vm["epochs"].as<int>();
  if (vm.count("data-dir")) config.data_dir = vm["data-dir"].as<std::string>();
  if (vm.count("keep")) config.keep = vm["keep"].as<int>();
  if (vm.count("save-every-steps")) config.save_every_steps = vm["save-every-steps"].as<int64_t>();
  if (vm["skip-corrupt"].as<bool>()) config.skip_corrupt = true;
  config.validate();
  return run(config, dir, &stored, stop_after_steps(vm), vm["quiet"].as<bool>());
}

}  // namespace keel::cli
