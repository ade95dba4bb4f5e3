#include "tools/cli/memory_timeline.h"

#include <algorithm>
#include <unordered_map>

namespace keel::cli {

TimelinePeaks timeline_peaks(const std::vector<LedgerEvent>& events) {
  TimelinePeaks p;
  for (size_t i = 0; i < events.size(); ++i) {
    const LedgerEvent& e = events[i];
    for (size_t k = 0; k < e.current.size(); ++k) p.category_peak[k] = std::max(p.category_peak[k], e.current[k]);
    if (e.total > p.peak) {
      p.peak = e.total;
      p.peak_index = i;
    }
  }
  return p;
}

std::vector<LiveAllocation> live_after(const std::vector<LedgerEvent>& events, size_t index) {
  std::unordered_map<uint64_t, LiveAllocation> live;
  for (size_t i = 0; i <= index && i < events.size(); ++i) {
    const LedgerEvent& e = events[i];
    switch (e.kind) {
      case LedgerEventKind::charge: live[e.handle] = LiveAllocation{e.bytes, e.category, e.owner, e.shape}; break;
      case LedgerEventKind::release: live.erase(e.handle); break;
      case LedgerEventKind::retag: {
        auto it = live.find(e.handle);
        if (it != live.end()) {
          it->second.category = e.category;
          it->second.owner = e.owner;
        }
        break;
      }
      case LedgerEventKind::mark: break;
    }
  }
  std::vector<LiveAllocation> out;
  out.reserve(live.size());
  for (auto& [handle, a] : live) out.push_back(std::move(a));
  std::sort(out.begin(), out.end(), [](const LiveAllocation& a, const LiveAllocation& b) {
    if (a.bytes != b.bytes) return a.bytes > b.bytes;
    return a.owner < b.owner;
  });
  return out;
}

std::vector<size_t> sample_events(const std::vector<LedgerEvent>& events, size_t max_points) {
  std::vector<size_t> out;
  if (events.size() <= std::max<size_t>(max_points, 2)) {
    for (size_t i = 0; i < events.size(); ++i) out.push_back(i);
    return out;
  }
  const size_t buckets = std::max<size_t>(max_points / 2, 1);
  const size_t width = (events.size() + buckets - 1) / buckets;
  for (size_t begin = 0; begin < events.size(); begin += width) {
    const size_t end = std::min(events.size(), begin + width);
    size_t lo = begin, hi = begin;
    for (size_t i = begin; i < end; ++i) {
      if (events[i].total < events[lo].total) lo = i;
      if (events[i].total > events[hi].total) hi = i;
    }
    out.push_back(std::min(lo, hi));
    if (lo != hi) out.push_back(std::max(lo, hi));
  }
  return out;
}

}  // namespace keel::cli
