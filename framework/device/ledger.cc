#include "framework/device/ledger.h"

#include <algorithm>
#include <cstdio>
#include <deque>
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

// A handle's bit that names an all-core record, not a core's own slot (whose indices stay below it).
constexpr uint64_t kAllCoresBit = uint64_t{1} << 31;

// A free slot of `slots` (one released before, or a new one), its index below kAllCoresBit.
template <class Slot>
uint32_t take_slot(std::vector<Slot>& slots, std::vector<uint32_t>& free_slots, const char* what) {
  if (!free_slots.empty()) {
    const uint32_t index = free_slots.back();
    free_slots.pop_back();
    return index;
  }
  if (slots.size() >= kAllCoresBit) throw std::length_error(std::string("too many live allocations on ") + what);
  slots.emplace_back();
  return static_cast<uint32_t>(slots.size() - 1);
}

// The shape core c holds of a buffer of shape `whole` divided as `kind` (units: its rows or elements).
Shape share_shape(const Shape& whole, CoreShare::Kind kind, int axis, int64_t units) {
  if (kind == CoreShare::Kind::flat) return {units};
  Shape block = whole;
  if (kind == CoreShare::Kind::axis_block) block[static_cast<size_t>(axis)] = units;
  return block;
}

}  // namespace

// A buffer charged on every core at once (CoreLedger::charge_all).
struct AllCoresRecord {
  LiveAllocation a;  // the whole buffer's bytes and shape
  CoreShare::Kind kind = CoreShare::Kind::whole;
  int axis = -1;
  std::vector<int64_t> units;  // each core's rows or elements (axis_block, flat)
  int64_t unit_bytes = 0;
  uint32_t generation = 0;
  bool used = false;

  int64_t bytes_on(int core) const {
    return kind == CoreShare::Kind::whole ? a.bytes : units[static_cast<size_t>(core)] * unit_bytes;
  }
  LiveAllocation on(int core) const {
    const int64_t u = kind == CoreShare::Kind::whole ? 0 : units[static_cast<size_t>(core)];
    return {bytes_on(core), a.category, a.owner, share_shape(a.shape, kind, axis, u)};
  }
};

struct LedgerCores {
  std::mutex mu;
  std::deque<CoreLedger> cores;  // never moved: each core's address is its pointers'
  std::vector<AllCoresRecord> records;  // slots reused once released, as a core's own
  std::vector<uint32_t> free_records;

  AllCoresRecord* find(uint64_t handle) {
    const uint64_t index = handle & 0xffffffffu;
    if ((index & kAllCoresBit) == 0 || (index & ~kAllCoresBit) >= records.size()) return nullptr;
    AllCoresRecord& r = records[index & ~kAllCoresBit];
    return r.used && r.generation == static_cast<uint32_t>(handle >> 32) ? &r : nullptr;
  }
};

CoreLedger::CoreLedger(int core, int64_t capacity_bytes, LedgerCores& shared)
    : core_(core), capacity_(capacity_bytes), mu_(shared.mu), shared_(&shared) {}

LedgerCores& CoreLedger::shared() const {
  if (shared_ == nullptr) throw std::logic_error("CoreLedger: an all-core charge on a core outside a Ledger");
  return *shared_;
}

uint64_t CoreLedger::charge(int64_t bytes, Category category, std::string_view owner, const Shape& shape) {
  return charge(bytes, category, owner, shape, hold());
}

void CoreLedger::release(uint64_t handle) { release(handle, hold()); }

void CoreLedger::retag(uint64_t handle, Category category, std::string owner) { retag(handle, category, owner, hold()); }

void CoreLedger::check_held(const Held& held) const {
  if (held.mutex() != &mu_ || !held.owns_lock()) throw std::logic_error("CoreLedger: called without its lock held");
}

uint64_t CoreLedger::charge(int64_t bytes, Category category, std::string_view owner, const Shape& shape,
                            const Held& held) {
  check_held(held);
  // Checked: a plan without a budget may sum tensors no real core could hold.
  const int64_t in_use_after = checked_add(total_.current, bytes, "the bytes charged to one core");
  if (capacity_ > 0 && in_use_after > capacity_) {
    throw ResourceExhausted(core_, bytes, exhausted_report(bytes, category, std::string(owner), shape));
  }
  add_charge(stats_[static_cast<int>(category)], bytes);
  add_charge(total_, bytes);
  const uint32_t index = take_slot(slots_, free_slots_, "one core");
  Slot& slot = slots_[index];
  slot.used = true;
  ++slot.generation;  // from 1: no handle is 0 (a mark's)
  slot.a.bytes = bytes;
  slot.a.category = category;
  slot.a.owner.assign(owner);
  slot.a.shape.assign(shape.begin(), shape.end());
  ++live_count_;
  const uint64_t handle = (static_cast<uint64_t>(slot.generation) << 32) | index;
  if (recording_) log(LedgerEventKind::charge, handle, slot.a, category);
  return handle;
}

LiveAllocation* CoreLedger::find_live(uint64_t handle) {
  const uint64_t index = handle & 0xffffffffu;
  if (index >= slots_.size()) return nullptr;
  Slot& slot = slots_[index];
  return slot.used && slot.generation == static_cast<uint32_t>(handle >> 32) ? &slot.a : nullptr;
}

void CoreLedger::release(uint64_t handle, const Held& held) {
  check_held(held);
  LiveAllocation* a = find_live(handle);
  if (a == nullptr) return;
  add_release(stats_[static_cast<int>(a->category)], a->bytes);
  add_release(total_, a->bytes);
  if (recording_) log(LedgerEventKind::release, handle, *a, a->category);
  const uint32_t index = static_cast<uint32_t>(handle & 0xffffffffu);
  slots_[index].used = false;
  free_slots_.push_back(index);
  --live_count_;
}

void CoreLedger::retag(uint64_t handle, Category category, const std::string& owner, const Held& held) {
  check_held(held);
  LiveAllocation* found = find_live(handle);
  if (found == nullptr) return;
  LiveAllocation& a = *found;
  const Category from = a.category;
  if (a.category != category) {
    add_release(stats_[static_cast<int>(a.category)], a.bytes);
    add_charge(stats_[static_cast<int>(category)], a.bytes);
    a.category = category;
  }
  a.owner = owner;
  if (recording_) log(LedgerEventKind::retag, handle, a, from);
}

uint64_t CoreLedger::charge_all(int64_t bytes, Category category, std::string_view owner, const Shape& shape,
                                const CoreShare& share, const Held& held) {
  check_held(held);
  LedgerCores& s = shared();
  const bool whole = share.kind == CoreShare::Kind::whole;
  if (!whole && share.units.size() != s.cores.size()) throw std::logic_error("CoreLedger::charge_all: one share per core");
  for (CoreLedger& c : s.cores) {  // every core's budget first: all charged, or none
    const int64_t b =
        whole ? bytes : checked_mul(share.units[static_cast<size_t>(c.core_)], share.unit_bytes, "a core's share");
    const int64_t in_use_after = checked_add(c.total_.current, b, "the bytes charged to one core");
    if (c.capacity_ > 0 && in_use_after > c.capacity_) {
      const int64_t u = whole ? 0 : share.units[static_cast<size_t>(c.core_)];
      throw ResourceExhausted(c.core_, b, c.exhausted_report(b, category, std::string(owner),
                                                             share_shape(shape, share.kind, share.axis, u)));
    }
  }
  const uint32_t index = take_slot(s.records, s.free_records, "one ledger");
  AllCoresRecord& r = s.records[index];
  r.used = true;
  ++r.generation;
  r.a.bytes = bytes;
  r.a.category = category;
  r.a.owner.assign(owner);
  r.a.shape.assign(shape.begin(), shape.end());
  r.kind = share.kind;
  r.axis = share.axis;
  r.units.assign(share.units.begin(), share.units.end());
  r.unit_bytes = share.unit_bytes;
  const uint64_t handle = (static_cast<uint64_t>(r.generation) << 32) | kAllCoresBit | index;
  for (CoreLedger& c : s.cores) {
    const int64_t b = r.bytes_on(c.core_);
    add_charge(c.stats_[static_cast<int>(category)], b);
    add_charge(c.total_, b);
    ++c.live_count_;
    if (c.recording_) c.log(LedgerEventKind::charge, handle, r.on(c.core_), category);
  }
  return handle;
}

void CoreLedger::release_all(uint64_t handle, const Held& held) {
  check_held(held);
  LedgerCores& s = shared();
  AllCoresRecord* r = s.find(handle);
  if (r == nullptr) return;
  for (CoreLedger& c : s.cores) {
    const int64_t b = r->bytes_on(c.core_);
    add_release(c.stats_[static_cast<int>(r->a.category)], b);
    add_release(c.total_, b);
    --c.live_count_;
    if (c.recording_) c.log(LedgerEventKind::release, handle, r->on(c.core_), r->a.category);
  }
  r->used = false;
  s.free_records.push_back(static_cast<uint32_t>(handle & ~kAllCoresBit & 0xffffffffu));
}

void CoreLedger::retag_all(uint64_t handle, Category category, const std::string& owner, const Held& held) {
  check_held(held);
  LedgerCores& s = shared();
  AllCoresRecord* r = s.find(handle);
  if (r == nullptr) return;
  const Category from = r->a.category;
  r->a.category = category;
  r->a.owner = owner;
  for (CoreLedger& c : s.cores) {
    if (from != category) {
      const int64_t b = r->bytes_on(c.core_);
      add_release(c.stats_[static_cast<int>(from)], b);
      add_charge(c.stats_[static_cast<int>(category)], b);
    }
    if (c.recording_) c.log(LedgerEventKind::retag, handle, r->on(c.core_), from);
  }
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

std::vector<LiveAllocation> CoreLedger::sorted_live() const {
  std::vector<LiveAllocation> out;
  out.reserve(live_count_);
  for (const Slot& slot : slots_) {
    if (slot.used) out.push_back(slot.a);
  }
  if (shared_ != nullptr) {
    for (const AllCoresRecord& r : shared_->records) {
      if (r.used) out.push_back(r.on(core_));
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const LiveAllocation& a, const LiveAllocation& b) {
    if (a.bytes != b.bytes) return a.bytes > b.bytes;
    return a.owner < b.owner;
  });
  return out;
}

std::vector<LiveAllocation> CoreLedger::live_allocations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sorted_live();
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
  const std::vector<LiveAllocation> sorted = sorted_live();
  const size_t shown = std::min<size_t>(sorted.size(), 10);
  for (size_t i = 0; i < shown; ++i) {
    const LiveAllocation& a = sorted[i];
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
  const auto block = std::make_shared<LedgerCores>();
  for (int i = 0; i < spec_.cores; ++i) {
    CoreLedger& core = block->cores.emplace_back(i, spec_.hbm_bytes_per_core, *block);
    cores_.push_back(std::shared_ptr<CoreLedger>(block, &core));
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
