// `keel memory --trace FILE.json`: the planned step as Chrome trace events (the Trace Event Format's
// JSON object form, which Perfetto and chrome://tracing open). One process per core; per core a
// counter track per category plus "total" (bytes in use), an instant event per charge, release and
// retag naming the owner and bytes, and the planner's phase marks. Time is the step's position: one
// microsecond per ledger event, not a duration.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "framework/model/planner.h"

namespace keel::cli {

// The trace of `plan` (planned with PlanDetail::timeline). "otherData" (contract): {"model",
// "device", "cores", "hbm_bytes_per_core", "batch_per_core", "fits", "position_unit"}.
nlohmann::json memory_trace(const MemoryPlan& plan, const std::string& model);

// For `flag` (e.g. "--trace"): throws UsageError, naming the file, unless `path` can be created
// (its directory exists and it is not a directory); checked before planning.
void check_output_path(const std::string& flag, const std::string& path);
// Writes `text` to `path` whole (UsageError naming the file if it cannot).
void write_output_file(const std::string& flag, const std::string& path, const std::string& text);

}  // namespace keel::cli
