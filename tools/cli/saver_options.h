// The memory savers' flags (DESIGN.md 2b), shared by `keel train`, `keel resume` and `keel memory`:
// --shard (partitioned optimizer state and gradients, framework/device/sharding.h), --remat
// (recomputed activations, framework/model/remat.h) and --precision (the layers' dtype policy,
// framework/layers/dtype_policy.h).
#pragma once

#include <string>
#include <vector>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "framework/device/strategy.h"
#include "framework/model/planner.h"
#include "tools/cli/run_config.h"

namespace keel::cli {

void add_saver_options(boost::program_options::options_description& d);
// Sets config's savers from the flags that were given; UsageError naming the flag for a bad value.
void apply_saver_options(const boost::program_options::variables_map& vm, RunConfig& config);
// --precision alone (keel evaluate has it without the other savers).
void apply_precision_option(const boost::program_options::variables_map& vm, RunConfig& config);

// What the planner and the strategy of a run with `config` use.
Savers savers_of(const RunConfig& config);
// config.layout as a LayoutMap (null when empty); UsageError for an entry that does not parse.
std::shared_ptr<const distribution::LayoutMap> layout_map(const RunConfig& config);
ReplicatedStrategy::Options strategy_options(const RunConfig& config);

// Before any data or weight exists: the training step with config's savers, planned on abstract
// tensors, must fit every core's HBM (else ResourceExhausted: the ledger's report, then the cheapest
// savers that would fit) or, on a device without a budget, this host's memory.
void check_step_fits(const RunConfig& config);

// The flags that select `savers` ("--shard optimizer"; "(none)" for no saver).
std::string saver_flags(const Savers& savers);

// `keel memory --suggest` (planner.h's suggest_savers): as JSON, [{"flags", "shard", "remat", "fits",
// "peak", "max_batch_per_core", "recompute_fraction", "collective_bytes"}] (contract), and as text.
nlohmann::json suggestions_json(const std::vector<SaverSuggestion>& suggestions);
void print_suggestions(const std::vector<SaverSuggestion>& suggestions, const DeviceSpec& device, int64_t batch_per_core);
// The last lines of exit 3's report: the cheapest combination that fits this batch, or, when none
// does, the largest batch some combination fits.
std::string cheapest_that_fits(const std::vector<SaverSuggestion>& suggestions, int64_t batch_per_core);

}  // namespace keel::cli
