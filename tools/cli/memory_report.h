// Memory reports of the `keel` binary, in one JSON vocabulary (`keel memory --json`'s field names):
// the plan of a training step, what a run's training measured (kept in its checkpoints), what an
// evaluation measured, and the tables that show them.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "framework/device/ledger.h"
#include "framework/model/planner.h"
#include "tools/cli/run_config.h"

namespace keel::cli {

// keel memory --json: {"device", "cores", "hbm_bytes_per_core", "batch_per_core", "fits",
// "max_batch_per_core", "per_core": [{"core", <category>..., "peak", "sent_bytes", "received_bytes"}]}.
nlohmann::json plan_json(const MemoryPlan& plan);

// What a run's training measured so far, cumulative across resumes: `before` is what the checkpoint
// this invocation resumed from recorded (null for a new run), `ledger` this invocation's, `steps` the
// steps this invocation ran. Per core: each category's high-water mark and that of their sum (the
// larger of before and now), and bytes host->core, core->host, sent to and received from other
// cores (summed); plus "steps", and the device and batch that produced them.
nlohmann::json training_memory(const Ledger& ledger, const RunConfig& config, int64_t steps, const nlohmann::json& before);

// What an evaluation measured: per core, each category's high-water mark and that of their sum.
nlohmann::json inference_memory(const Ledger& ledger, const RunConfig& config);

// Text tables: a footprint (training_memory or inference_memory); plan and measurement side by side.
void print_footprint(const std::string& title, const nlohmann::json& memory);
void print_plan_and_measurement(const nlohmann::json& plan, const nlohmann::json& measured);

// Every per-core category peak (and "peak") of a plan equals the measurement's.
bool peaks_equal(const nlohmann::json& plan, const nlohmann::json& measured);

// The largest per-core "peak" of a footprint, and the category with the largest peak on that core.
int64_t peak_per_core(const nlohmann::json& memory);
std::string dominant_category(const nlohmann::json& memory);

}  // namespace keel::cli
