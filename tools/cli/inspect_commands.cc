// `keel evaluate`, `keel memory`, `keel summary`, `keel models`.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "framework/checkpoint/checkpoint.h"
#include "framework/checkpoint/run_directory.h"
#include "framework/core/limits.h"
#include "framework/layers/initializers.h"
#include "framework/layers/layer.h"
#include "framework/model/planner.h"
#include "models/zoo.h"
#include "tools/cli/commands.h"
#include "tools/cli/data_sources.h"
#include "tools/cli/run_config.h"
#include "tools/cli/stored_run.h"

namespace keel::cli {
namespace {

// A run directory (its `latest`) or a checkpoint file.
std::string checkpoint_file(const std::string& target) {
  if (std::filesystem::is_directory(target)) {
    std::optional<std::string> latest = RunDirectory(target).latest();
    if (!latest) throw UsageError(target + " holds no checkpoint (no `latest`)");
    return *latest;
  }
  if (!std::filesystem::exists(target)) throw UsageError("no such run directory or checkpoint: " + quote_untrusted(target));
  return target;
}

nlohmann::json plan_json(const MemoryPlan& plan) {
  nlohmann::json per_core = nlohmann::json::array();
  for (const CoreMemory& m : plan.per_core) {
    nlohmann::json c = {{"core", m.core}};
    for (int k = 0; k < kNumCategories; ++k) c[category_name(static_cast<Category>(k))] = m.category_peak[static_cast<size_t>(k)];
    c["peak"] = m.peak;
    c["sent_bytes"] = m.sent_bytes;
    c["received_bytes"] = m.received_bytes;
    per_core.push_back(c);
  }
  return {{"device", plan.device.name},
          {"cores", plan.device.cores},
          {"hbm_bytes_per_core", plan.device.hbm_bytes_per_core},
          {"batch_per_core", plan.batch_per_core},
          {"fits", plan.fits},
          {"max_batch_per_core", plan.max_batch_per_core ? nlohmann::json(*plan.max_batch_per_core) : nlohmann::json(nullptr)},
          {"per_core", per_core}};
}

void print_plan(const RunConfig& config, const MemoryPlan& plan) {
  std::printf("Memory plan: %s on %s (%d cores x %s), %lld per core (global batch %lld), one training step\n",
              config.model.c_str(), plan.device.name.c_str(), plan.device.cores,
              plan.device.has_budget() ? format_bytes(plan.device.hbm_bytes_per_core).c_str() : "no budget",
              static_cast<long long>(plan.batch_per_core), static_cast<long long>(plan.batch_per_core * plan.device.cores));
  std::printf("%-5s", "core");
  for (int k = 0; k < kNumCategories; ++k) std::printf(" %13s", category_name(static_cast<Category>(k)));
  std::printf(" %13s %8s\n", "peak", "of HBM");
  for (const CoreMemory& m : plan.per_core) {
    std::printf("%-5d", m.core);
    for (int k = 0; k < kNumCategories; ++k) std::printf(" %13lld", static_cast<long long>(m.category_peak[static_cast<size_t>(k)]));
    if (plan.device.has_budget()) {
      std::printf(" %13lld %7.2f%%\n", static_cast<long long>(m.peak),
                  100.0 * static_cast<double>(m.peak) / static_cast<double>(plan.device.hbm_bytes_per_core));
    } else {
      std::printf(" %13lld %8s\n", static_cast<long long>(m.peak), "-");
    }
  }
  std::printf("(bytes; each category's own high-water mark, and the high-water mark of their sum)\n");
  if (!plan.per_core.empty()) {
    int64_t peak = 0;
    for (const CoreMemory& m : plan.per_core) peak = std::max(peak, m.peak);
    std::printf("Peak per core: %s%s\n", format_bytes(peak).c_str(),
                plan.device.has_budget() ? (plan.fits ? " - fits" : " - DOES NOT FIT") : "");
  }
  if (plan.per_core.size() > 1) {
    // The collectives' binomial tree: cores with children also receive (and hold) partial sums.
    std::printf("Between cores per step (sent / received):");
    for (const CoreMemory& m : plan.per_core) {
      std::printf("%s %d: %s / %s", m.core == 0 ? "" : ",", m.core, format_bytes(m.sent_bytes).c_str(),
                  format_bytes(m.received_bytes).c_str());
    }
    std::printf("\n");
  }
  if (plan.max_batch_per_core) {
    std::printf("Largest per-core batch that fits: %lld\n", static_cast<long long>(*plan.max_batch_per_core));
  }
}

}  // namespace

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
// pipeline (its shuffle, batch and device), then --output writes them to a new checkpoint file.
int64_t recompute_statistics(const po::variables_map& vm, const RunConfig& config, const TrainState& state,
                             Model& model) {
  const int64_t batches = vm["recompute-bn-stats"].as<int64_t>();
  if (batches <= 0 || batches > (int64_t{1} << 40)) {
    throw UsageError("--recompute-bn-stats must be a positive number of training batches, got " + std::to_string(batches));
  }
  const int64_t used = model.recompute_batch_statistics(training_dataset(config), batches);
  if (vm.count("output")) {
    const std::string output = vm["output"].as<std::string>();
    write_new_file(output, [&](const std::string& tmp) { save_checkpoint(tmp, model, model.optimizer(), state); });
  }
  return used;
}

void print_evaluation(const po::variables_map& vm, const std::string& file, const RunConfig& config,
                      const std::string& split, const Logs& logs, int64_t bn_batches) {
  if (vm["json"].as<bool>()) {
    nlohmann::json j{{"loss", logs.at("loss")}, {"accuracy", logs.at("accuracy")},
                     {"samples", static_cast<int64_t>(logs.at("samples"))}};
    if (bn_batches > 0) j["bn_stats_batches"] = bn_batches;
    std::cout << j.dump() << "\n";
    return;
  }
  if (bn_batches > 0) {
    std::printf("BatchNormalization statistics recomputed over %lld training batches (weights unchanged)%s%s\n",
                static_cast<long long>(bn_batches), vm.count("output") ? "; written to " : "",
                vm.count("output") ? vm["output"].as<std::string>().c_str() : "");
  }
  std::printf("%s on %s/%s (%lld samples): loss %.4f - accuracy %.4f\n", file.c_str(), config.dataset.c_str(),
              split.c_str(), static_cast<long long>(logs.at("samples")), logs.at("loss"), logs.at("accuracy"));
}

po::options_description evaluate_options() {
  po::options_description d("Usage: keel evaluate RUN_DIR|CHECKPOINT [--split test] [--json]\n"
                            "       keel evaluate RUN_DIR --recompute-bn-stats 100 [--output FILE.h5]\n\n"
                            "Loss and accuracy of a checkpoint on a dataset split.");
  d.add_options()("help,h", "this help")
      ("target", po::value<std::string>(), "run directory (its latest checkpoint) or a ckpt-<step>.h5 file")
      ("split", po::value<std::string>()->default_value("test"), "train | test")
      ("data-dir", po::value<std::string>(), "directory of the dataset files (default: the run's)")
      ("dataset", po::value<std::string>(), "evaluate on another dataset: fashion_mnist, tfrecord:DIR or images:DIR (default: the run's)")
      ("skip-corrupt", po::bool_switch(), "tfrecord:/images: skip (and count) corrupt records and images")
      ("recompute-bn-stats", po::value<int64_t>(),
       "first set BatchNormalization's moving statistics to the average over N batches of the run's training data, "
       "weights frozen (for short runs, whose moving averages lag behind the weights)")
      ("output", po::value<std::string>(), "with --recompute-bn-stats: also save the checkpoint with the recomputed "
                                           "statistics as this new .h5 file, outside the run directory")
      ("json", po::bool_switch(), "print {\"loss\": x, \"accuracy\": x, \"samples\": n}");
  return d;
}

}  // namespace

int evaluate_command(const std::vector<std::string>& args) {
  po::options_description d = evaluate_options();
  po::positional_options_description pos;
  pos.add("target", 1);
  po::variables_map vm = parse_args(args, d, &pos);
  if (vm.count("help")) {
    std::cout << d << "\n";
    return kExitOk;
  }
  if (!vm.count("target")) throw UsageError("keel evaluate needs a run directory or checkpoint, e.g. `keel evaluate checkpoints/mlp`");
  const std::string split = vm["split"].as<std::string>();
  if (split != "train" && split != "test") throw UsageError("--split must be train or test, got '" + quote_untrusted(split) + "'");
  if (vm.count("output") && !vm.count("recompute-bn-stats")) throw UsageError("--output goes with --recompute-bn-stats");
  if (vm.count("output")) check_output_path(vm["output"].as<std::string>());
  const std::string file = checkpoint_file(vm["target"].as<std::string>());
  const StoredRun stored = read_stored_run(file);
  const TrainState& state = stored.state;
  RunConfig config = stored.config;
  if (vm.count("data-dir")) config.data_dir = vm["data-dir"].as<std::string>();
  const RunConfig trained = config;  // recomputed statistics come from the run's own training data
  if (vm.count("dataset")) {
    config.dataset = vm["dataset"].as<std::string>();
    parse_dataset_source(config.dataset);
  }
  if (vm["skip-corrupt"].as<bool>()) config.skip_corrupt = true;
  Dataset data = evaluation_dataset(config, split);

  clear_session();
  set_random_seed(config.seed);
  ReplicatedStrategy strategy(config.device);
  std::unique_ptr<Model> model;
  {
    auto scope = strategy.scope();
    model = build_model(config);
    check_model_matches(stored, *model);
    load_checkpoint(file, *model, model->optimizer());
  }
  const int64_t bn_batches = vm.count("recompute-bn-stats") ? recompute_statistics(vm, trained, state, *model) : 0;
  print_evaluation(vm, file, config, split, model->evaluate(data), bn_batches);
  return kExitOk;
}

int memory_command(const std::vector<std::string>& args) {
  po::options_description model_opts("Model"), device_opts("Device");
  add_model_options(model_opts);
  add_device_options(device_opts);
  po::options_description d("Usage: keel memory --model resnet50 --input-shape 224x224x3 --device v3-8 "
                            "--batch-per-core 128 [--max-batch] [--json]\n\n"
                            "What each core needs for one training step, planned without allocating it.");
  d.add_options()("help,h", "this help")
      ("max-batch", po::bool_switch(), "also find the largest per-core batch that fits")
      ("json", po::bool_switch(), "print one JSON object");
  d.add(model_opts).add(device_opts);
  po::variables_map vm = parse_args(args, d);
  if (vm.count("help")) {
    std::cout << d << "\n";
    return kExitOk;
  }
  RunConfig config;
  apply_model_options(vm, config);
  apply_device_options(vm, config);
  config.validate();
  const ModelFactory factory = model_factory(config);
  const Shape labels = label_shape(config);
  MemoryPlan plan = plan_training_step(factory, config.device, config.batch_per_core, labels);
  if (vm["max-batch"].as<bool>()) plan.max_batch_per_core = find_max_batch(factory, config.device, labels);
  if (vm["json"].as<bool>()) {
    std::cout << plan_json(plan).dump() << "\n";
  } else {
    print_plan(config, plan);
  }
  return kExitOk;
}

int summary_command(const std::vector<std::string>& args) {
  po::options_description model_opts("Model");
  add_model_options(model_opts);
  po::options_description d("Usage: keel summary --model mlp [--classes N] [--input-shape S]\n\n"
                            "Keras-style summary table with exact parameter counts.");
  d.add_options()("help,h", "this help");
  d.add(model_opts);
  po::variables_map vm = parse_args(args, d);
  if (vm.count("help")) {
    std::cout << d << "\n";
    return kExitOk;
  }
  RunConfig config;
  apply_model_options(vm, config);
  config.validate();
  clear_session();
  // Shapes only: the summary of a large model needs none of its memory.
  ReplicatedStrategy strategy(DeviceSpec::preset("cpu"), ReplicatedStrategy::Options{/*abstract=*/true, 0});
  auto scope = strategy.scope();
  std::unique_ptr<Model> model = build_model(config);
  std::cout << model->summary();
  return kExitOk;
}

int models_command(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::cout << "Usage: keel models\n\nLists the model zoo.\n";
    return kExitOk;
  }
  if (!args.empty()) throw UsageError("keel models takes no arguments");
  for (const zoo::ZooEntry& e : zoo::models()) {
    std::printf("%-12s input %-14s %s\n", e.name.c_str(), shape_string(e.default_input_shape).c_str(), e.description.c_str());
  }
  return kExitOk;
}

}  // namespace keel::cli
