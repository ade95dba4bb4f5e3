#include "tools/cli/saver_options.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace keel::cli {

void add_saver_options(boost::program_options::options_description& d) {
  d.add_options()
      ("shard", boost::program_options::value<std::string>(),
       "partition training state across the cores: none (default; every core holds everything), optimizer "
       "(ZeRO-1: Adam's slots), gradients (ZeRO-2: slots and gradients), full (ZeRO-3: parameters too, gathered "
       "per layer); bit-identical to none")
      ("remat", boost::program_options::value<std::string>(),
       "recompute activations in backward: none (default), segments (keep only each segment's input: each residual "
       "block, each layer of a Sequential), or Keras's per-layer modes: full (every layer), larger_than:BYTES (layers "
       "whose output is larger), layers:REGEX (layers whose name matches); bit-identical to none")
      ("layout", boost::program_options::value<std::vector<std::string>>(),
       "Keras 3's LayoutMap, one PATTERN=AXES per flag (repeatable): variables whose path (\"dense_1/kernel\") the "
       "regex PATTERN finds are split across the cores along the axis named model, e.g. 'dense.*kernel=None,model' "
       "'dense.*bias=model': Dense layers then compute column-parallel; bit-identical to no layout; `--layout none`: "
       "none (a resumed run's stored layout dropped)")
      ("precision", boost::program_options::value<std::string>(),
       "the layers' dtype policy: float32 (default) or mixed_bfloat16 (Keras's: float32 variables and optimizer "
       "state; bfloat16 compute with float32 accumulation, and 2-byte bfloat16 activations)");
}

void apply_saver_options(const boost::program_options::variables_map& vm, RunConfig& config) {
  try {
    if (vm.count("shard")) config.shard = parse_sharding_mode(vm["shard"].as<std::string>());
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--shard: ") + e.what());
  }
  try {
    if (vm.count("remat")) config.remat = parse_remat(vm["remat"].as<std::string>());
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--remat: ") + e.what());
  }
  apply_precision_option(vm, config);
  if (vm.count("layout")) {
    config.layout = vm["layout"].as<std::vector<std::string>>();
    if (config.layout == std::vector<std::string>{"none"}) config.layout.clear();  // resume without the stored one
  }
}

void apply_precision_option(const boost::program_options::variables_map& vm, RunConfig& config) {
  try {
    if (vm.count("precision")) config.precision = mixed_precision::Policy(vm["precision"].as<std::string>()).name();
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--precision: ") + e.what());
  }
}

Savers savers_of(const RunConfig& config) {
  return Savers{config.shard, config.remat, mixed_precision::Policy(config.precision), layout_map(config)};
}

std::shared_ptr<const distribution::LayoutMap> layout_map(const RunConfig& config) {
  if (config.layout.empty()) return nullptr;
  try {
    return std::make_shared<const distribution::LayoutMap>(distribution::LayoutMap::from_specs(config.layout));
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--layout: ") + e.what());
  }
}

ReplicatedStrategy::Options strategy_options(const RunConfig& config) {
  ReplicatedStrategy::Options options;
  options.shard = config.shard;
  options.layout_map = layout_map(config);
  return options;
}

std::string saver_flags(const Savers& savers) {
  std::string flags;
  if (savers.shard != ShardingMode::none) flags += std::string("--shard ") + sharding_mode_name(savers.shard);
  if (savers.remat != Remat::none) flags += std::string(flags.empty() ? "" : " ") + "--remat " + remat_name(savers.remat);
  if (savers.precision.compute_dtype() != DType::float32) {
    flags += std::string(flags.empty() ? "" : " ") + "--precision " + savers.precision.name();
  }
  if (savers.layout != nullptr) {
    for (const std::string& spec : savers.layout->specs()) flags += std::string(flags.empty() ? "" : " ") + "--layout '" + spec + "'";
  }
  return flags.empty() ? "(none)" : flags;
}

nlohmann::json suggestions_json(const std::vector<SaverSuggestion>& suggestions) {
  nlohmann::json out = nlohmann::json::array();
  for (const SaverSuggestion& s : suggestions) {
    out.push_back({{"flags", saver_flags(s.savers)},
                   {"shard", sharding_mode_name(s.savers.shard)},
                   {"remat", remat_name(s.savers.remat)},
                   {"precision", s.savers.precision.name()},
                   {"fits", s.fits},
                   {"peak", s.peak_bytes},
                   {"max_batch_per_core", s.max_batch_per_core ? nlohmann::json(*s.max_batch_per_core) : nlohmann::json(nullptr)},
                   {"recompute_fraction", s.recompute_fraction},
                   {"collective_bytes", s.collective_bytes}});
  }
  return out;
}

void print_suggestions(const std::vector<SaverSuggestion>& suggestions, const DeviceSpec& device, int64_t batch_per_core) {
  std::printf("\nSavers at %lld per core on %s, cheapest first (keel memory --suggest):\n", static_cast<long long>(batch_per_core),
              device.name.c_str());
  std::printf("%-62s %-5s %14s %10s %12s %22s\n", "flags", "fits", "peak per core", "max batch", "recomputed", "between cores per step");
  for (const SaverSuggestion& s : suggestions) {
    const std::string max_batch = s.max_batch_per_core ? std::to_string(*s.max_batch_per_core) : "-";
    std::printf("%-62s %-5s %14s %10s %11.0f%% %22s\n", saver_flags(s.savers).c_str(), s.fits ? "yes" : "no",
                format_bytes(s.peak_bytes).c_str(), max_batch.c_str(), 100.0 * s.recompute_fraction,
                format_bytes(s.collective_bytes).c_str());
  }
  std::printf("(between cores: bytes all cores send in one step; recomputed: FLOPs recomputed by remat, of the step's)\n");
}

std::string cheapest_that_fits(const std::vector<SaverSuggestion>& suggestions, int64_t batch_per_core) {
  for (const SaverSuggestion& s : suggestions) {
    if (!s.fits) continue;
    return "The cheapest savers that fit " + std::to_string(batch_per_core) + " per core: " + saver_flags(s.savers) +
           " (peak " + format_bytes(s.peak_bytes) + " per core; " + format_bytes(s.collective_bytes) +
           " between cores per step). See `keel memory --suggest`.";
  }
  const SaverSuggestion* best = nullptr;
  for (const SaverSuggestion& s : suggestions) {
    if (s.max_batch_per_core && (!best || *s.max_batch_per_core > *best->max_batch_per_core)) best = &s;
  }
  if (best == nullptr || *best->max_batch_per_core == 0) {
    return "No combination of keel's savers fits even a batch of 1 per core; use a device with more HBM per core.";
  }
  return "No combination of keel's savers fits " + std::to_string(batch_per_core) + " per core; the largest batch that " +
         "fits is " + std::to_string(*best->max_batch_per_core) + " per core with " + saver_flags(best->savers) + ".";
}

namespace {

// This host's physical memory: the budget of a device without HBM (the `cpu` preset).
int64_t host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return INT64_MAX;
  return static_cast<int64_t>(pages) * page;
}

}  // namespace

// Before any data or weight exists: the training step, planned on abstract tensors through the same
// code path (framework/model/planner.h), must fit every core's HBM — the ledger's own report (exit 3)
// otherwise — or, on a device without a budget, this host's memory. A model or batch too large thus
// ends before anything is allocated, never after gigabytes were.
void check_step_fits(const RunConfig& config) {
  const ModelFactory factory = model_factory(config);
  if (config.device.has_budget()) {
    try {
      check_training_step_fits(factory, config.device, config.batch_per_core, label_shape(config), savers_of(config));
    } catch (const ResourceExhausted& e) {  // the report ends with what would fit
      const auto suggestions = suggest_savers(factory, config.device, config.batch_per_core, label_shape(config));
      throw ResourceExhausted(e.core(), e.requested_bytes(), e.what() + ("\n" + cheapest_that_fits(suggestions, config.batch_per_core)));
    }
    return;
  }
  const MemoryPlan plan = plan_training_step(factory, config.device, config.batch_per_core, label_shape(config), savers_of(config));
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

}  // namespace keel::cli
