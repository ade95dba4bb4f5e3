// `keel memory`, `keel summary`, `keel models`.
#include <algorithm>
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
#include "tools/cli/stored_run.h"

namespace keel::cli {
namespace {

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

// keel memory RUN: the run's own configuration (model, device, batch, frozen layers) planned, beside
// what its training measured (recorded in its checkpoints).
int memory_of_run(const po::variables_map& vm) {
  for (const char* flag : {"model", "input-shape", "classes", "device", "cores", "hbm-per-core", "batch-per-core", "freeze"}) {
    if (vm.count(flag)) throw UsageError(std::string("--") + flag + " describes a new run; `keel memory RUN` plans the run's own");
  }
  const std::string target = vm["run"].as<std::string>();
  if (!std::filesystem::is_directory(target) && !std::filesystem::exists(target)) {
    throw UsageError("no such run directory or checkpoint: " + quote_untrusted(target));
  }
  const SelectedCheckpoint selected = std::filesystem::is_directory(target)
                                          ? select_checkpoint(RunDirectory(target), /*move_aside=*/false, "memory")
                                          : verify_file(target, "memory");
  const RunConfig config = read_stored_run(selected.path).config;  // within keel's limits, or refused
  const ModelFactory factory = model_factory(config);
  MemoryPlan plan = plan_training_step(factory, config.device, config.batch_per_core, label_shape(config));
  if (vm["max-batch"].as<bool>()) plan.max_batch_per_core = find_max_batch(factory, config.device, label_shape(config));
  nlohmann::json j = plan_json(plan);
  const nlohmann::json& measured = selected.check.state.memory;
  j["measured"] = measured;
  j["plan_equals_measured"] = measured.is_null() ? nlohmann::json(nullptr) : nlohmann::json(peaks_equal(j, measured));
  if (vm["json"].as<bool>()) {
    std::cout << j.dump() << "\n";
    return kExitOk;
  }
  print_plan(config, plan);
  if (measured.is_null()) {
    std::printf("Measured: unknown (%s predates keel's record of what training measured)\n", selected.path.c_str());
    return kExitOk;
  }
  std::printf("\nPlan and what training measured (%s, %lld steps; high-water marks in bytes):\n", selected.path.c_str(),
              static_cast<long long>(measured.value("steps", int64_t{0})));
  print_plan_and_measurement(j, measured);
  std::printf("%s\n", peaks_equal(j, measured) ? "Plan and measurement are equal." : "Plan and measurement DIFFER.");
  return kExitOk;
}

}  // namespace

int memory_command(const std::vector<std::string>& args) {
  po::options_description model_opts("Model"), device_opts("Device");
  add_model_options(model_opts);
  add_device_options(device_opts);
  po::options_description d("Usage: keel memory --model resnet50 --input-shape 224x224x3 --device v3-8 "
                            "--batch-per-core 128 [--max-batch] [--json]\n"
                            "       keel memory RUN_DIR [--json]   (the run's own plan beside what its training measured)\n\n"
                            "What each core needs for one training step, planned without allocating it.");
  add_freeze_option(model_opts);
  d.add_options()("help,h", "this help")
      ("run", po::value<std::string>(), "a run directory or checkpoint: plan its configuration")
      ("max-batch", po::bool_switch(), "also find the largest per-core batch that fits")
      ("json", po::bool_switch(), "print one JSON object");
  d.add(model_opts).add(device_opts);
  po::positional_options_description pos;
  pos.add("run", 1);
  po::variables_map vm = parse_args(args, d, &pos);
  if (vm.count("help")) {
    std::cout << d << "\n";
    return kExitOk;
  }
  if (vm.count("run")) return memory_of_run(vm);
  RunConfig config;
  apply_model_options(vm, config);
  apply_device_options(vm, config);
  if (vm.count("freeze")) config.freeze = vm["freeze"].as<std::string>();
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
  add_head_options(model_opts);
  po::options_description d("Usage: keel summary --model mlp [--classes N] [--input-shape S] [--include-top false --pooling avg]\n\n"
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
  apply_head_options(vm, config);
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
