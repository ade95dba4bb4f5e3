// `keel memory --report FILE.html`: one self-contained page (inline CSS, SVG drawn by inline JS, no
// network) showing the planned step: per core, a stacked area of bytes in use by category over the
// step with the budget line and the phases; each core's peaks; the largest live allocations at the
// peak; and `--suggest`'s table when there are suggestions. The numbers are embedded as one JSON
// block, <script type="application/json" id="keel-memory-data">, which the page draws from.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "framework/model/planner.h"

namespace keel::cli {

// The page's data (contract): {"model", "device", "cores", "hbm_bytes_per_core", "batch_per_core",
// "fits", "categories": [...], "per_core": [{"core", <category>..., "peak", "peak_position",
// "events", "phases": [{"label", "position"}], "largest_at_peak": [{"owner", "category", "bytes",
// "shape"}], "series": {"position": [...], <category>: [...]}}], "suggestions": null or [{...}]}.
// Figures come from the plan's timeline (PlanDetail::timeline); `suggestions` is null when there
// are none (then the page has no suggestions section).
nlohmann::json memory_report_data(const MemoryPlan& plan, const std::string& model, const nlohmann::json& suggestions);

// The page for `data` (memory_report_data's).
std::string memory_report_html(const nlohmann::json& data);

}  // namespace keel::cli
