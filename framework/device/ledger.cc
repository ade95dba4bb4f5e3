#include "framework/device/ledger.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace keel {

ResourceExhausted::ResourceExhausted(int core, int64_t requested_bytes, std::string report)
    : std::runtime_error(std::move(report)), core_(core), requested_bytes_(requested_bytes) {}

const char* ledger_event_kind_name(LedgerEventKind kind) {
  switch (kind) {
    case LedgerEventKind::charge: return "charge";
    case LedgerEventKind::release: return "release";
    case LedgerEventKind::retag: return "retag";
    case LedgerEventKind::mark: return "mark";
  }
  return "?";
}

namespace {

void add_charge(MemoryStat& s, int64_t bytes) {
  s.current += bytes;
  s.allocated += bytes;
  s.alloc_count += 1;
  s.peak = std::max(s.peak, s.current);
}

void add_release(MemoryStat& s, int64_t bytes) {
  s.current -= bytes;
  s.freed += bytes;
  s.free_count += 1;
}

}  // namespace

uint64_t CoreLedger::charge(int64_t bytes, Category category, std::string owner, const Shape& shape) {
  std::lock_guard<std::mutex> lock(mu_);
  // Checked: a plan without a budget may sum tensors no real core could hold.
  const int64_t in_use_after = checked_add(total_.current, bytes, "the bytes charged to one core");
  if (capacity_ > 0 && in_use_after > capacity_) {
    throw ResourceExhausted(core_, bytes, exhausted_report(bytes, category, owner, shape));
  }
  add_charge(stats_[static_cast<int>(category)], bytes);
  add_charge(total_, bytes);
  uint64_t handle = next_handle_++;
  auto it = live_.emplace(handle, LiveAllocation{bytes, category, std::move(owner), shape}).first;
  if (recording_) log(LedgerEventKind::charge, handle, it->second, category);
  return handle;
}

void CoreLedger::release(uint64_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(handle);
  if (it == live_.end()) return;
  add_release(stats_[static_cast<int>(it->second.category)], it->second.bytes);
  add_release(total_, it->second.bytes);
  if (recording_) log(LedgerEventKind::release, handle, it->second, it->second.category);
  live_.erase(it);
}

void CoreLedger::retag(uint64_t handle, Category category, std::string owner) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(handle);
  if (it == live_.end()) return;
  LiveAllocation& a = it->second;
  const Category from = a.category;
  if (a.category != category) {
    add_release(stats_[static_cast<int>(a.category)], a.bytes);
    add_charge(stats_[static_cast<int>(category)], a.bytes);
    a.category = category;
  }
  a.owner = std::move(owner);
  if (recording_) log(LedgerEventKind::retag, handle, a, from);
}

void CoreLedger::log(LedgerEventKind kind, uint64_t handle, const LiveAllocation& a, Category from) {
  LedgerEvent e{kind, handle, a.bytes, a.category, from, a.owner, a.shape, {}, total_.current};
  for (int k = 0; k < kNumCategories; ++k) e.current[static_cast<size_t>(k)] = stats_[k].current;
  events_.push_back(std::move(e));
}

void CoreLedger::record_events(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  recording_ = on;
}

void CoreLedger::mark(std::string label) {
  std::lock_guard<std::mutex> lock(mu_);
  if (recording_) log(LedgerEventKind::mark, 0, LiveAllocation{0, Category::workspace, std::move(label), {}}, Category::workspace);
}

std::vector<LedgerEvent> CoreLedger::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_;
}

void CoreLedger::record_host_to_core(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  transfers_.host_to_core_bytes += bytes;
  transfers_.host_to_core_count += 1;
}

void CoreLedger::record_core_to_host(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  transfers_.core_to_host_bytes += bytes;
  transfers_.core_to_host_count += 1;
}

void CoreLedger::record_collective(int64_t sent_bytes, int64_t received_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  transfers_.sent_bytes += sent_bytes;
  transfers_.received_bytes += received_bytes;
  transfers_.collective_count += 1;
}

void CoreLedger::record_flops(int64_t flops, bool recomputed) {
  std::lock_guard<std::mutex> lock(mu_);
  compute_.forward_flops += flops;
  if (recomputed) compute_.recomputed_flops += flops;
}

ComputeStat CoreLedger::compute() const {
  std::lock_guard<std::mutex> lock(mu_);
  return compute_;
}

MemoryStat CoreLedger::stat(Category category) const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_[static_cast<int>(category)];
}

MemoryStat CoreLedger::total() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_;
}

TransferStat CoreLedger::transfers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return transfers_;
}

std::vector<LiveAllocation> CoreLedger::live_allocations() const {
  std::vector<LiveAllocation> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.reserve(live_.size());
    for (const auto& [handle, a] : live_) out.push_back(a);
  }
  std::stable_sort(out.begin(), out.end(), [](const LiveAllocation& a, const LiveAllocation& b) {
    if (a.bytes != b.bytes) return a.bytes > b.bytes;
    return a.owner < b.owner;
  });
  return out;
}

void CoreLedger::reset_peaks() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& s : stats_) s.peak = s.current;
  total_.peak = total_.current;
}

// Shaped after XLA's "Resource exhausted: Out of memory while trying to allocate" report.
std::string CoreLedger::exhausted_report(int64_t bytes, Category category, const std::string& owner,
                                         const Shape& shape) const {
  std::ostringstream os;
  os << "Resource exhausted: out of HBM on core " << core_ << " while trying to allocate " << bytes
     << " bytes (" << format_bytes(bytes) << ") for " << category_name(category) << " '" << owner
     << "' " << shape_string(shape) << ".\n";
  os << "  core " << core_ << ": " << total_.current << " bytes in use (" << format_bytes(total_.current)
     << ") of " << capacity_ << " (" << format_bytes(capacity_) << "); " << (capacity_ - total_.current)
     << " bytes free.\n";
  os << "  in use by category:";
  for (int c = 0; c < kNumCategories; ++c) {
    os << " " << category_name(static_cast<Category>(c)) << "=" << stats_[c].current;
  }
  os << "\n  largest live allocations:\n";
  std::vector<const LiveAllocation*> sorted;
  for (const auto& [h, a] : live_) sorted.push_back(&a);
  std::stable_sort(sorted.begin(), sorted.end(), [](const LiveAllocation* a, const LiveAllocation* b) {
    if (a->bytes != b->bytes) return a->bytes > b->bytes;
    return a->owner < b->owner;
  });
  const size_t shown = std::min<size_t>(sorted.size(), 10);
  for (size_t i = 0; i < shown; ++i) {
    const LiveAllocation& a = *sorted[i];
    char line[64];
    std::snprintf(line, sizeof line, "    %12lld bytes  %-11s ", static_cast<long long>(a.bytes),
                  category_name(a.category));
    os << line << a.owner << " " << shape_string(a.shape) << "\n";
  }
  if (sorted.size() > shown) os << "    ... and " << (sorted.size() - shown) << " more\n";
  os << "  Reduce --batch-per-core (see `keel memory ... --max-batch`) or use a device with more HBM per core.";
  return os.str();
}

Ledger::Ledger(DeviceSpec spec) : spec_(std::move(spec)) {
  for (int i = 0; i < spec_.cores; ++i) {
    cores_.push_back(std::make_shared<CoreLedger>(i, spec_.hbm_bytes_per_core));
  }
}

void Ledger::reset_peaks() {
  for (auto& c : cores_) c->reset_peaks();
}

void Ledger::record_events(bool on) {
  for (auto& c : cores_) c->record_events(on);
}

void Ledger::mark(const std::string& label) {
  for (auto& c : cores_) c->mark(label);
}

}  // namespace keel
