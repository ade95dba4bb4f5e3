// `keel evaluate`: a run, a checkpoint or a Keras weight file on a dataset split, with the memory footprint.
#include <algorithm>
#include <functional>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "framework/checkpoint/checkpoint.h"
#include "framework/checkpoint/checkpoint_snapshot.h"
#include "framework/checkpoint/keras_weights.h"
#include "framework/checkpoint/run_directory.h"
#include "framework/core/limits.h"
#include "framework/layers/initializers.h"
#include "framework/layers/layer.h"
#include "framework/model/planner.h"
#include "models/zoo.h"
#include "tools/cli/checkpoint_selection.h"
#include "tools/cli/commands.h"
#include "tools/cli/data_sources.h"
#include "tools/cli/memory_report.h"
#include "tools/cli/run_config.h"
#include "tools/cli/saver_options.h"
#include "tools/cli/stored_run.h"

namespace keel::cli {
namespace {

// --output: a new file, outside every run directory (a run's pruning and `latest` must never meet it).
void check_output_path(const std::string& output) {
  namespace fs = std::filesystem;
  const fs::path path(output);
  if (path.extension() != ".h5") throw UsageError("--output must name a .h5 file, got '" + quote_untrusted(output) + "'");
  std::error_code ec;
  if (fs::exists(fs::symlink_status(path, ec))) {
    throw UsageError("--output " + output + " already exists; keel never writes over a file: choose a new name");
  }
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec)) throw UsageError("--output " + output + ": directory " + dir.string() + " does not exist");
  if (fs::exists(dir / "latest", ec)) {
    throw UsageError("--output " + output + " is inside a run directory; write it elsewhere, so that the run's own "
                     "checkpoints stay what training wrote");
  }
}

// --recompute-bn-stats N: precise BatchNormalization statistics from N batches of the run's training
// pipeline (its shuffle, batch and device), then --output writes them to a new checkpoint file with
// the source checkpoint's optimizer state (read from the file: nothing of it occupies the cores).
int64_t recompute_statistics(const po::variables_map& vm, const RunConfig& config, const std::string& source,
                             const TrainState& state, Model& model) {
  const int64_t batches = vm["recompute-bn-stats"].as<int64_t>();
  if (batches <= 0 || batches > (int64_t{1} << 40)) {
    throw UsageError("--recompute-bn-stats must be a positive number of training batches, got " + std::to_string(batches));
  }
  const int64_t used = model.recompute_batch_statistics(training_dataset(config), batches);
  if (vm.count("output")) {
    CheckpointSnapshot snapshot = snapshot_checkpoint(model, model.optimizer(), state);
    read_optimizer_state(source, snapshot);
    write_new_file(vm["output"].as<std::string>(), [&](const std::string& tmp) { write_checkpoint(tmp, snapshot); });
  }
  return used;
}

// One evaluated run, checkpoint or weight file.
struct Evaluation {
  std::string file;
  RunConfig config;
  Logs logs;
  int64_t bn_batches = 0;
  nlohmann::json training_memory;   // null: unknown (a weight file, or a checkpoint from before keel recorded it)
  nlohmann::json inference_memory;  // this evaluation's own high-water marks
  int64_t checkpoint_bytes = 0;
  int64_t params = 0;
};

nlohmann::json evaluation_json(const Evaluation& e) {
  nlohmann::json j{{"loss", e.logs.at("loss")},
                   {"accuracy", e.logs.at("accuracy")},
                   {"samples", static_cast<int64_t>(e.logs.at("samples"))},
                   {"training_memory", e.training_memory},
                   {"inference_memory", e.inference_memory},
                   {"checkpoint_bytes", e.checkpoint_bytes},
                   {"params", e.params}};
  if (e.bn_batches > 0) j["bn_stats_batches"] = e.bn_batches;
  for (const auto& [name, value] : e.logs) {  // the run's other metrics (--metrics), by Keras's names
    if (name != "loss" && name != "accuracy" && name != "samples") j[name] = value;
  }
  return j;
}

void print_evaluation(const po::variables_map& vm, const Evaluation& e, const std::string& split) {
  if (vm["json"].as<bool>()) {
    std::cout << evaluation_json(e).dump() << "\n";
    return;
  }
  if (e.bn_batches > 0) {
    std::printf("BatchNormalization statistics recomputed over %lld training batches (weights unchanged)%s%s\n",
                static_cast<long long>(e.bn_batches), vm.count("output") ? "; written to " : "",
                vm.count("output") ? vm["output"].as<std::string>().c_str() : "");
  }
  std::string others;
  for (const auto& [name, value] : e.logs) {
    if (name == "loss" || name == "accuracy" || name == "samples") continue;
    char text[32];
    std::snprintf(text, sizeof text, " %.4f", value);
    others += " - " + name + text;
  }
  std::printf("%s on %s/%s (%lld samples): loss %.4f - accuracy %.4f%s\n", e.file.c_str(), e.config.dataset.c_str(),
              split.c_str(), static_cast<long long>(e.logs.at("samples")), e.logs.at("loss"), e.logs.at("accuracy"),
              others.c_str());
  if (e.training_memory.is_null()) {
    std::printf("Training footprint: unknown (the checkpoint predates keel's record of it)\n");
  } else {
    print_footprint("Training footprint per core on " + e.config.device.name + ", measured over " +
                        std::to_string(e.training_memory.value("steps", int64_t{0})) + " steps (bytes):",
                    e.training_memory);
  }
  print_footprint("Inference footprint per core of this evaluation (bytes):", e.inference_memory);
  std::printf("Checkpoint: %s on disk; %lld parameters\n", format_bytes(e.checkpoint_bytes).c_str(),
              static_cast<long long>(e.params));
}

// --steps N: the first N batches of the split (Keras's evaluate(steps=N)); -1: all of them.
int64_t evaluation_steps(const po::variables_map& vm) {
  if (!vm.count("steps")) return -1;
  const int64_t steps = vm["steps"].as<int64_t>();
  if (steps <= 0) throw UsageError("--steps must be a positive number of batches, got " + std::to_string(steps));
  return steps;
}

// Builds the model in `strategy`, then `load` fills it; the evaluation's footprint is measured from
// the loaded weights on (peaks restart there).
Evaluation run_evaluation(const RunConfig& config, const std::string& split, int64_t steps, ReplicatedStrategy& strategy,
                          const std::function<void(Model&)>& load, const std::function<int64_t(Model&)>& before) {
  // Every value checked before anything is built from it.
  config.validate();
  Evaluation e;
  e.config = config;
  Dataset data = evaluation_dataset(config, split);
  std::unique_ptr<Model> model;
  {
    auto scope = strategy.scope();
    model = build_model(config);
    load(*model);
  }
  e.bn_batches = before ? before(*model) : 0;
  strategy.ledger().reset_peaks();
  e.logs = model->evaluate(data, steps);
  e.inference_memory = inference_memory(strategy.ledger(), config);
  for (Variable* v : model->variables()) e.params += num_elements(v->shape());
  return e;
}

// `selected_path` is set as soon as a checkpoint is chosen.
Evaluation evaluate_selected(const po::variables_map& vm, const std::string& target, const std::string& split,
                             std::string& selected_path) {
  const SelectedCheckpoint selected = select_target(target, "evaluate");
  selected_path = selected.path;
  const StoredRun stored = read_stored_run(selected.path);  // within keel's limits, or refused
  const TrainState& state = stored.state;
  RunConfig config = stored.config;
  if (vm.count("data-dir")) config.data_dir = vm["data-dir"].as<std::string>();
  apply_precision_option(vm, config);
  const RunConfig trained = config;  // recomputed statistics come from the run's own training data
  if (vm.count("dataset")) {
    config.dataset = vm["dataset"].as<std::string>();
    parse_dataset_source(config.dataset);
  }
  if (vm["skip-corrupt"].as<bool>()) config.skip_corrupt = true;
  clear_session();
  set_random_seed(config.seed);
  ReplicatedStrategy strategy(config.device);
  std::function<int64_t(Model&)> before;
  if (vm.count("recompute-bn-stats")) {
    before = [&](Model& m) { return recompute_statistics(vm, trained, selected.path, state, m); };
  }
  int64_t checkpoint_bytes = 0;
  Evaluation e = run_evaluation(config, split, evaluation_steps(vm), strategy, [&](Model& m) {
    check_model_matches(stored, m);
    load_model_weights(selected.path, m);
    // Sized as it is read: a run still training may prune this checkpoint while we evaluate.
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(selected.path, ec);
    if (!ec) checkpoint_bytes = static_cast<int64_t>(bytes);
  }, before);
  e.file = selected.path;
  e.training_memory = state.memory;
  e.checkpoint_bytes = checkpoint_bytes;
  return e;
}

// A run that is still training prunes its old checkpoints: the one chosen may vanish before or while
// it is read. Then the run's newest good checkpoint is chosen again, a few times at most.
Evaluation evaluate_target(const po::variables_map& vm, const std::string& target, const std::string& split) {
  for (int attempt = 1;; ++attempt) {
    std::string path;
    try {
      return evaluate_selected(vm, target, split, path);
    } catch (const std::exception&) {
      std::error_code ec;
      const bool vanished = !path.empty() && !std::filesystem::exists(path, ec) && std::filesystem::is_directory(target, ec);
      if (!vanished || attempt == 5) throw;
    }
  }
}

po::options_description evaluate_options() {
  po::options_description d("Usage: keel evaluate RUN_DIR|CHECKPOINT [--split test] [--json]\n"
                            "       keel evaluate RUN_A RUN_B ... [--json | --csv]   (one comparison table)\n"
                            "       keel evaluate RUN_DIR --recompute-bn-stats 100 [--output FILE.h5]\n"
                            "       keel evaluate --model resnet50 --weights FILE.h5 [--input-shape S] [--classes N] "
                            "[--device D] [--batch-per-core B] [--by-name]\n\n"
                            "Loss and accuracy of a checkpoint, or of a Keras weight file, on a dataset split, and its "
                            "memory footprint per core: what training measured and what this evaluation needs.");
  d.add_options()("help,h", "this help")
      ("target", po::value<std::vector<std::string>>(), "run directories (each its newest checkpoint that verifies) or ckpt-<step>.h5 files")
      ("split", po::value<std::string>()->default_value("test"), "train | test")
      ("steps", po::value<int64_t>(), "evaluate the first N batches of the split only, as Keras's evaluate(steps=N) "
                                      "(default: all of it; `samples` says how many were evaluated)")
      ("data-dir", po::value<std::string>(), "directory of the dataset files (default: the run's)")
      ("dataset", po::value<std::string>(), "evaluate on another dataset: fashion_mnist, tfrecord:DIR or images:DIR (default: the run's)")
      ("skip-corrupt", po::bool_switch(), "tfrecord:/images: skip (and count) corrupt records and images")
      ("recompute-bn-stats", po::value<int64_t>(),
       "first set BatchNormalization's moving statistics to the average over N batches of the run's training data, "
       "weights frozen (for short runs, whose moving averages lag behind the weights)")
      ("output", po::value<std::string>(), "with --recompute-bn-stats: also save the checkpoint with the recomputed "
                                           "statistics as this new .h5 file, outside the run directory")
      ("json", po::bool_switch(), "print {\"loss\", \"accuracy\", \"samples\", \"training_memory\", \"inference_memory\", "
                                  "\"checkpoint_bytes\", \"params\"} (an array of them for several runs)")
      ("csv", po::bool_switch(), "several runs: the comparison table as CSV")
      ("weights", po::value<std::string>(), "evaluate a Keras weight file (model.save_weights, model.save, "
                                            "keras.applications) loaded into --model, instead of a run")
      ("by-name", po::bool_switch(), "--weights: match layers by name (default: in order, as Keras's load_weights)")
      ("precision", po::value<std::string>(), "evaluate under this dtype policy: float32 or mixed_bfloat16 "
                                              "(default: the run's; float32 for --weights)");
  po::options_description model_opts("Model and device (with --weights)");
  add_model_options(model_opts);
  add_device_options(model_opts);
  d.add(model_opts);
  po::options_description host_opts("Host");
  add_host_options(host_opts);
  d.add(host_opts);
  return d;
}

// keel evaluate --model M --weights FILE: no run, a Keras weight file.
int evaluate_weights(const po::variables_map& vm, const std::string& split) {
  if (vm.count("target")) throw UsageError("give a run directory or checkpoint, or --weights FILE, not both");
  if (vm.count("recompute-bn-stats") || vm.count("output")) throw UsageError("--recompute-bn-stats goes with a run, not --weights");
  const std::string file = vm["weights"].as<std::string>();
  if (!std::filesystem::is_regular_file(file)) throw UsageError("--weights: no such file: " + file.substr(0, 300));
  RunConfig config;
  apply_model_options(vm, config);
  apply_device_options(vm, config);
  if (vm.count("data-dir")) config.data_dir = vm["data-dir"].as<std::string>();
  apply_precision_option(vm, config);
  if (vm.count("dataset")) config.dataset = vm["dataset"].as<std::string>();
  parse_dataset_source(config.dataset);
  if (vm["skip-corrupt"].as<bool>()) config.skip_corrupt = true;
  clear_session();
  set_random_seed(config.seed);
  ReplicatedStrategy strategy(config.device);
  KerasWeightsReport report;
  Evaluation e = run_evaluation(config, split, evaluation_steps(vm), strategy, [&](Model& m) {
    report = load_keras_weights(file, m, {vm["by-name"].as<bool>(), false});
  }, nullptr);
  e.file = file;
  e.checkpoint_bytes = static_cast<int64_t>(std::filesystem::file_size(file));
  if (!vm["json"].as<bool>()) {
    std::printf("Loaded %lld layers (%lld values) from %s\n", static_cast<long long>(report.layers_loaded),
                static_cast<long long>(report.values_loaded), file.c_str());
  }
  print_evaluation(vm, e, split);
  return kExitOk;
}

// Several runs: one line each.
void print_comparison(const po::variables_map& vm, const std::vector<Evaluation>& runs) {
  if (vm["json"].as<bool>()) {
    nlohmann::json all = nlohmann::json::array();
    for (const Evaluation& e : runs) all.push_back(evaluation_json(e));
    for (size_t i = 0; i < runs.size(); ++i) all[i]["run"] = runs[i].file;
    std::cout << all.dump() << "\n";
    return;
  }
  const bool csv = vm["csv"].as<bool>();
  if (csv) std::printf("run,device,batch_per_core,accuracy,loss,training_peak_per_core,training_dominant,inference_peak_per_core\n");
  else std::printf("%-40s %-8s %6s %9s %8s %18s %12s %18s\n", "run", "device", "batch", "accuracy", "loss",
                   "train peak/core", "dominant", "infer peak/core");
  for (const Evaluation& e : runs) {
    const bool known = !e.training_memory.is_null();
    const std::string train_peak = known ? std::to_string(peak_per_core(e.training_memory)) : (csv ? "" : "unknown");
    const std::string dominant = known ? dominant_category(e.training_memory) : (csv ? "" : "-");
    if (csv) {
      std::printf("%s,%s,%lld,%.6f,%.6f,%s,%s,%lld\n", e.file.c_str(), e.config.device.name.c_str(),
                  static_cast<long long>(e.config.batch_per_core), e.logs.at("accuracy"), e.logs.at("loss"),
                  train_peak.c_str(), dominant.c_str(), static_cast<long long>(peak_per_core(e.inference_memory)));
    } else {
      std::printf("%-40s %-8s %6lld %9.4f %8.4f %18s %12s %18lld\n", e.file.c_str(), e.config.device.name.c_str(),
                  static_cast<long long>(e.config.batch_per_core), e.logs.at("accuracy"), e.logs.at("loss"),
                  train_peak.c_str(), dominant.c_str(), static_cast<long long>(peak_per_core(e.inference_memory)));
    }
  }
}

}  // namespace

int evaluate_command(const std::vector<std::string>& args) {
  po::options_description d = evaluate_options();
  po::positional_options_description pos;
  pos.add("target", -1);
  po::variables_map vm = parse_args(args, d, &pos);
  if (vm.count("help")) {
    std::cout << d << "\n";
    return kExitOk;
  }
  apply_host_options(vm);
  const std::string split = vm["split"].as<std::string>();
  if (split != "train" && split != "test") throw UsageError("--split must be train or test, got '" + quote_untrusted(split) + "'");
  if (vm["json"].as<bool>() && vm["csv"].as<bool>()) throw UsageError("give --json or --csv, not both");
  evaluation_steps(vm);  // checked before anything is read
  if (vm.count("weights")) return evaluate_weights(vm, split);
  if (!vm.count("target")) throw UsageError("keel evaluate needs a run directory or checkpoint, e.g. `keel evaluate checkpoints/mlp`");
  for (const char* flag : {"model", "input-shape", "classes", "device", "cores", "hosts", "hbm-per-core", "batch-per-core",
                           "loss", "label-smoothing"}) {
    if (vm.count(flag)) throw UsageError(std::string("--") + flag + " goes with --weights; a run evaluates with its own");
  }
  const std::vector<std::string> targets = vm["target"].as<std::vector<std::string>>();
  if (vm.count("output") && !vm.count("recompute-bn-stats")) throw UsageError("--output goes with --recompute-bn-stats");
  if (vm.count("output")) check_output_path(vm["output"].as<std::string>());
  if (targets.size() > 1 && vm.count("recompute-bn-stats")) throw UsageError("--recompute-bn-stats takes one run");
  if (targets.size() == 1) {
    if (vm["csv"].as<bool>()) throw UsageError("--csv is the comparison table of several runs");
    print_evaluation(vm, evaluate_target(vm, targets[0], split), split);
    return kExitOk;
  }
  std::vector<Evaluation> runs;
  for (const std::string& target : targets) runs.push_back(evaluate_target(vm, target, split));
  print_comparison(vm, runs);
  return kExitOk;
}

}  // namespace keel::cli
