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
#include "tools/cli/memory_html.h"
#include "tools/cli/memory_report.h"
#include "tools/cli/memory_trace.h"
#include "tools/cli/run_config.h"
#include "tools/cli/saver_options.h"
#include "tools/cli/stored_run.h"

namespace keel::cli {
namespace {

// The slice's hosts: each one's cores and the sums of their figures (memory_report.h, per_host_json).
void print_hosts(const MemoryPlan& plan) {
  const nlohmann::json hosts = per_host_json(plan.device, plan_json(plan)["per_core"]);
  std::printf("\nPer host (%d hosts x %d cores; sums of its cores):\n%-5s %-11s", plan.device.hosts,
              plan.device.cores_per_host(), "host", "cores");
  for (int k = 0; k < kNumCategories; ++k) std::printf(" %13s", category_name(static_cast<Category>(k)));
  std::printf(" %13s %13s\n", "peak", "sent");
  for (const nlohmann::json& h : hosts) {
    const std::string cores = std::to_string(h["cores"].front().get<int>()) + "-" + std::to_string(h["cores"].back().get<int>());
    std::printf("%-5d %-11s", h["host"].get<int>(), cores.c_str());
    for (int k = 0; k < kNumCategories; ++k) {
      std::printf(" %13lld", static_cast<long long>(h[category_name(static_cast<Category>(k))].get<int64_t>()));
    }
    std::printf(" %13lld %13lld\n", static_cast<long long>(h["peak"].get<int64_t>()), static_cast<long long>(h["sent_bytes"].get<int64_t>()));
  }
}

void print_plan(const RunConfig& config, const MemoryPlan& plan) {
  const std::string slice = plan.device.hosts > 1 ? ", " + std::to_string(plan.device.hosts) + " hosts x " +
                                                        std::to_string(plan.device.cores_per_host()) : "";
  const std::string savers = saver_flags(plan.savers);
  const std::string shard = savers == "(none)" ? "" : ", " + savers;
  std::printf("Memory plan: %s on %s (%d cores x %s%s), %lld per core (global batch %lld)%s, one training step\n",
              config.model.c_str(), plan.device.name.c_str(), plan.device.cores,
              plan.device.has_budget() ? format_bytes(plan.device.hbm_bytes_per_core).c_str() : "no budget", slice.c_str(),
              static_cast<long long>(plan.batch_per_core), static_cast<long long>(plan.batch_per_core * plan.device.cores),
              shard.c_str());
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
  if (plan.device.hosts > 1) print_hosts(plan);
  if (plan.max_batch_per_core) {
    std::printf("Largest per-core batch that fits: %lld\n", static_cast<long long>(*plan.max_batch_per_core));
  }
}


// --trace FILE.json and --report FILE.html: checked before planning, written after.
struct MemoryOutputs {
  std::string trace, report;
  PlanDetail detail() const { return trace.empty() && report.empty() ? PlanDetail::figures : PlanDetail::timeline; }
};

MemoryOutputs memory_outputs(const po::variables_map& vm) {
  MemoryOutputs out;
  if (vm.count("trace")) check_output_path("--trace", out.trace = vm["trace"].as<std::string>());
  if (vm.count("report")) check_output_path("--report", out.report = vm["report"].as<std::string>());
  if (!out.trace.empty() && out.trace == out.report) throw UsageError("--trace and --report name the same file; give two");
  return out;
}

// `suggestions`: --suggest's JSON, or null (the page then has no such section).
void write_memory_outputs(const MemoryOutputs& out, const MemoryPlan& plan, const std::string& model,
                          const nlohmann::json& suggestions = nullptr) {
  const auto dump = [](const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); };
  if (!out.trace.empty()) write_output_file("--trace", out.trace, dump(memory_trace(plan, model)));
  if (!out.report.empty()) write_output_file("--report", out.report, memory_report_html(memory_report_data(plan, model, suggestions)));
}

void print_memory_outputs(const MemoryOutputs& out) {
  if (!out.trace.empty()) std::printf("Trace: %s (Chrome trace events; open in Perfetto or chrome://tracing)\n", out.trace.c_str());
  if (!out.report.empty()) std::printf("Report: %s (one self-contained page)\n", out.report.c_str());
}

}  // namespace

namespace {

// keel memory RUN: the run's own configuration (model, device, batch, frozen layers) planned, beside
// what its training measured (recorded in its checkpoints).
int memory_of_run(const po::variables_map& vm) {
  for (const char* flag : {"model", "input-shape", "classes", "device", "cores", "hosts", "hbm-per-core", "batch-per-core", "freeze",
                           "shard", "remat", "precision", "layout"}) {
    if (vm.count(flag)) throw UsageError(std::string("--") + flag + " describes a new run; `keel memory RUN` plans the run's own");
  }
  const std::string target = vm["run"].as<std::string>();
  const SelectedCheckpoint selected = select_target(target, "memory");
  const RunConfig config = read_stored_run(selected.path).config;  // within keel's limits, or refused
  const MemoryOutputs outputs = memory_outputs(vm);
  const ModelFactory factory = model_factory(config);
  MemoryPlan plan = plan_training_step(factory, config.device, config.batch_per_core, label_shape(config), savers_of(config),
                                       outputs.detail());
  if (vm["max-batch"].as<bool>()) {
    plan.max_batch_per_core = find_max_batch(factory, config.device, label_shape(config), savers_of(config));
  }
  std::vector<SaverSuggestion> suggestions;
  if (vm["suggest"].as<bool>()) suggestions = suggest_savers(factory, config.device, config.batch_per_core, label_shape(config));
  const nlohmann::json suggested = vm["suggest"].as<bool>() ? suggestions_json(suggestions) : nlohmann::json(nullptr);
  nlohmann::json j = plan_json(plan);
  if (!suggested.is_null()) j["suggestions"] = suggested;
  const nlohmann::json& measured = selected.check.state.memory;
  j["measured"] = measured;
  j["plan_equals_measured"] = measured.is_null() ? nlohmann::json(nullptr) : nlohmann::json(peaks_equal(j, measured));
  write_memory_outputs(outputs, plan, config.model, suggested);
  if (vm["json"].as<bool>()) {
    std::cout << j.dump() << "\n";
    return kExitOk;
  }
  print_plan(config, plan);
  if (!suggested.is_null()) print_suggestions(suggestions, config.device, config.batch_per_core);
  print_memory_outputs(outputs);
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
  add_saver_options(device_opts);
  po::options_description d("Usage: keel memory --model resnet50 --input-shape 224x224x3 --device v3-8 "
                            "--batch-per-core 128 [--max-batch] [--json]\n"
                            "       [--trace FILE.json] [--report FILE.html]\n"
                            "       keel memory RUN_DIR [--json]   (the run's own plan beside what its training measured)\n"
                            "       keel memory --model mlp --device v3-32 --batch-per-core 16   (a pod slice: per core and per host)\n\n"
                            "What each core needs for one training step, planned without allocating it; on a pod slice\n"
                            "(--device v3-32, or --hosts H --cores N --hbm-per-core SIZE) also each host's sums, all in\n"
                            "this one process.");
  add_freeze_option(model_opts);
  d.add_options()("help,h", "this help")
      ("run", po::value<std::string>(), "a run directory or checkpoint: plan its configuration")
      ("max-batch", po::bool_switch(), "also find the largest per-core batch that fits")
      ("suggest", po::bool_switch(), "also plan every combination of memory savers: peak, largest batch and cost of each")
      ("json", po::bool_switch(), "print one JSON object")
      ("trace", po::value<std::string>(), "also write the planned step as Chrome trace events (Perfetto, chrome://tracing)")
      ("report", po::value<std::string>(), "also write the planned step as one self-contained HTML page");
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
  apply_saver_options(vm, config);
  if (vm.count("freeze")) config.freeze = vm["freeze"].as<std::string>();
  const MemoryOutputs outputs = memory_outputs(vm);
  const ModelFactory factory = model_factory(config);
  const Shape labels = label_shape(config);
  MemoryPlan plan = plan_training_step(factory, config.device, config.batch_per_core, labels, savers_of(config), outputs.detail());
  if (vm["max-batch"].as<bool>()) plan.max_batch_per_core = find_max_batch(factory, config.device, labels, savers_of(config));
  std::vector<SaverSuggestion> suggestions;
  if (vm["suggest"].as<bool>()) suggestions = suggest_savers(factory, config.device, config.batch_per_core, labels);
  const nlohmann::json suggested = vm["suggest"].as<bool>() ? suggestions_json(suggestions) : nlohmann::json(nullptr);
  write_memory_outputs(outputs, plan, config.model, suggested);
  if (vm["json"].as<bool>()) {
    nlohmann::json j = plan_json(plan);
    if (!suggested.is_null()) j["suggestions"] = suggested;
    std::cout << j.dump() << "\n";
  } else {
    print_plan(config, plan);
    if (!suggested.is_null()) print_suggestions(suggestions, config.device, config.batch_per_core);
    print_memory_outputs(outputs);
  }
  return kExitOk;
}

namespace {

// A shape with the batch dimension (-1 in summary rows) as JSON's null, as Keras writes (None, 10).
nlohmann::json shape_json(const Shape& shape) {
  nlohmann::json j = nlohmann::json::array();
  for (int64_t d : shape) j.push_back(d < 0 ? nlohmann::json(nullptr) : nlohmann::json(d));
  return j;
}

// `keel summary --json` (contract, README): the rows of the text table, and its totals.
nlohmann::json summary_json(const Model& model) {
  nlohmann::json layers = nlohmann::json::array();
  for (const SummaryRow& r : model.summary_rows()) {
    layers.push_back({{"name", r.name}, {"class_name", r.class_name}, {"output_shape", shape_json(r.output_shape)},
                      {"params", r.params}, {"connected_to", r.connected_to}});
  }
  int64_t trainable = 0, non_trainable = 0;
  for (Variable* v : model.variables()) (v->trainable() ? trainable : non_trainable) += num_elements(v->shape());
  Shape input = model.input_shape(), output = model.output_shape();
  input.insert(input.begin(), -1);
  output.insert(output.begin(), -1);
  return {{"name", model.name()},
          {"class_name", model.class_name()},
          {"input_shape", shape_json(input)},
          {"output_shape", shape_json(output)},
          {"layers", layers},
          {"total_params", trainable + non_trainable},
          {"trainable_params", trainable},
          {"non_trainable_params", non_trainable}};
}

}  // namespace

int summary_command(const std::vector<std::string>& args) {
  po::options_description model_opts("Model");
  add_model_options(model_opts);
  add_head_options(model_opts);
  po::options_description d("Usage: keel summary --model mlp [--classes N] [--input-shape S] [--include-top false --pooling avg] [--json]\n\n"
                            "Keras-style summary table with exact parameter counts.");
  d.add_options()("help,h", "this help")
      ("json", po::bool_switch(), "print one JSON object: {\"name\", \"class_name\", \"input_shape\", \"output_shape\", "
                                  "\"layers\": [{\"name\", \"class_name\", \"output_shape\", \"params\", \"connected_to\"}], "
                                  "\"total_params\", \"trainable_params\", \"non_trainable_params\"}");
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
  if (vm["json"].as<bool>()) {
    std::cout << summary_json(*model).dump() << "\n";
  } else {
    std::cout << model->summary();
  }
  return kExitOk;
}

int models_command(const std::vector<std::string>& args) {
  const bool help = !args.empty() && (args[0] == "--help" || args[0] == "-h");
  if (help) {
    std::cout << "Usage: keel models [--json]\n\nLists the model zoo, then the device presets (--device) with their "
                 "hosts x cores per host and HBM per core. --json prints the zoo only: an array of {\"name\", "
                 "\"default_input_shape\", \"description\"}.\n";
    return kExitOk;
  }
  const bool json = args.size() == 1 && args[0] == "--json";
  if (!args.empty() && !json) throw UsageError("keel models takes only --json");
  nlohmann::json all = nlohmann::json::array();
  for (const zoo::ZooEntry& e : zoo::models()) {
    if (json) {
      all.push_back({{"name", e.name}, {"default_input_shape", e.default_input_shape}, {"description", e.description}});
    } else {
      std::printf("%-12s input %-14s %s\n", e.name.c_str(), shape_string(e.default_input_shape).c_str(), e.description.c_str());
    }
  }
  if (json) {
    std::cout << all.dump() << "\n";
    return kExitOk;
  }
  std::printf("\nDevice presets (--device; a pod slice runs in one process, or in several under mpirun -np P):\n");
  for (const std::string& name : DeviceSpec::preset_names()) {
    const DeviceSpec d = DeviceSpec::preset(name);
    std::printf("%-12s %2d host%s x %3d cores  %s per core\n", name.c_str(), d.hosts, d.hosts == 1 ? " " : "s",
                d.cores_per_host(), d.has_budget() ? format_bytes(d.hbm_bytes_per_core).c_str() : "host RAM");
  }
  return kExitOk;
}

}  // namespace keel::cli
