// Reading a planned step's event log (MemoryPlan::timeline, the ledger's own record): the peaks it
// reaches, what was live at the peak, and a sample of it small enough to draw. The trace
// (memory_trace.h) and the page (memory_html.h) both read the log through these, so they show the
// same step that `keel memory` reports.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "framework/device/ledger.h"

namespace keel::cli {

struct TimelinePeaks {
  std::array<int64_t, kNumCategories> category_peak{};  // each category's high-water mark
  int64_t peak = 0;                                    // the high-water mark of their sum
  size_t peak_index = 0;                               // the first event that reaches `peak`
};

TimelinePeaks timeline_peaks(const std::vector<LedgerEvent>& events);

// The allocations live right after event `index`, largest first (ties by owner).
std::vector<LiveAllocation> live_after(const std::vector<LedgerEvent>& events, size_t index);

// Indices of at most about `max_points` events, in order, that draw the log's curve: all of them
// when few enough; otherwise, per bucket of consecutive events, the ones with the lowest and the
// highest sum (so every bucket's extremes, the peak among them, are drawn exactly).
std::vector<size_t> sample_events(const std::vector<LedgerEvent>& events, size_t max_points);

}  // namespace keel::cli
