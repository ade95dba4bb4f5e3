// The HBM ledger: every byte a core holds, by category and owner.
//
// Each core has a CoreLedger. A charge that would take the core past its budget throws
// ResourceExhausted *before* anything is allocated. Mirrored variables are charged on every core
// (each real core holds its own copy), however the host stores them.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "framework/core/shape.h"
#include "framework/device/device_spec.h"

namespace keel {

// current / peak / allocated / freed, in bytes and counts (PyTorch's allocator Stat, per category).
struct MemoryStat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;   // bytes ever charged
  int64_t freed = 0;       // bytes ever released
  int64_t alloc_count = 0;
  int64_t free_count = 0;
};

struct LiveAllocation {
  int64_t bytes = 0;
  Category category = Category::workspace;
  std::string owner;  // "dense/kernel", "activation:dense_1", "infeed:images"
  Shape shape;
};

struct TransferStat {
  int64_t host_to_core_bytes = 0;
  int64_t host_to_core_count = 0;
  int64_t core_to_host_bytes = 0;
  int64_t core_to_host_count = 0;
  // Cross-replica traffic of the collectives (framework/device/collectives.h): bytes this core sent
  // to and received from other cores, and the number of collective operations it took part in.
  int64_t sent_bytes = 0;
  int64_t received_bytes = 0;
  int64_t collective_count = 0;
};

// The forward matrix products and convolutions a core ran (2 FLOPs per multiply-add): remat's cost
// is the share recomputed in backward.
struct ComputeStat {
  int64_t forward_flops = 0;     // every forward pass, recomputation included
  int64_t recomputed_flops = 0;  // of which remat's second passes
};

// One entry of a core's event log (CoreLedger::record_events): what changed, and each category's
// bytes in use right after it, as the ledger counted them; a log replayed in order therefore
// reaches exactly the ledger's peaks.
enum class LedgerEventKind { charge, release, retag, mark };

struct LedgerEvent {
  LedgerEventKind kind = LedgerEventKind::mark;
  uint64_t handle = 0;  // the allocation (charge, release, retag); 0 for a mark
  int64_t bytes = 0;
  Category category = Category::workspace;       // the allocation's category after the event
  Category from_category = Category::workspace;  // retag: its category before
  std::string owner;                             // a mark: its label ("train_step")
  Shape shape;
  std::array<int64_t, kNumCategories> current{};  // bytes in use per category after the event
  int64_t total = 0;                              // their sum
};

const char* ledger_event_kind_name(LedgerEventKind kind);  // "charge", "release", "retag", "mark"

class ResourceExhausted : public std::runtime_error {
 public:
  ResourceExhausted(int core, int64_t requested_bytes, std::string report);
  int core() const { return core_; }
  int64_t requested_bytes() const { return requested_bytes_; }

 private:
  int core_;
  int64_t requested_bytes_;
};

// How a buffer charged on every core of a Ledger at once (CoreLedger::charge_all) divides among them.
struct CoreShare {
  enum class Kind { whole, axis_block, flat };
  Kind kind = Kind::whole;         // whole: each core holds all of it (a mirrored tensor)
  int axis = -1;                   // axis_block: each core holds units[c] rows of this axis, nothing else
  std::span<const int64_t> units;  // axis_block: each core's rows; flat: each core's elements (a flat shard)
  int64_t unit_bytes = 0;          // bytes of one such row or element
};

struct LedgerCores;  // a Ledger's cores, their lock and their records of all-core charges (ledger.cc)

class CoreLedger {
 public:
  // With a lock of its own, or (`shared`: a Ledger's core) the lock and records of its Ledger's cores.
  CoreLedger(int core, int64_t capacity_bytes) : core_(core), capacity_(capacity_bytes), mu_(own_mu_) {}
  CoreLedger(int core, int64_t capacity_bytes, LedgerCores& shared);
  CoreLedger(const CoreLedger&) = delete;
  CoreLedger& operator=(const CoreLedger&) = delete;

  // Returns a handle for release/retag. Throws ResourceExhausted if the budget would be exceeded.
  uint64_t charge(int64_t bytes, Category category, std::string_view owner, const Shape& shape);
  void release(uint64_t handle);
  // Moves a live allocation to another category/owner (e.g. a backward result that becomes a
  // variable's gradient). Peaks of the destination are updated; the total does not change.
  void retag(uint64_t handle, Category category, std::string owner);

  // This core's lock, which every core of one Ledger shares: taken once, charges, releases and
  // retags of one buffer on all of them run under it (a mirrored tensor's charges), each checking
  // that `held` is its lock. std::logic_error otherwise.
  using Held = std::unique_lock<std::mutex>;
  Held hold() const { return Held(mu_); }
  uint64_t charge(int64_t bytes, Category category, std::string_view owner, const Shape& shape, const Held& held);
  void release(uint64_t handle, const Held& held);
  void retag(uint64_t handle, Category category, const std::string& owner, const Held& held);

  // A buffer charged on every core of this core's Ledger at once (mirrored, or each core its share):
  // one record for all of them, its owner and shape stored once (a host program charges each of its
  // step's tensors to all 8 cores of a v3-8, each a record in a slot the step's data had evicted), and
  // each core's statistics, live allocations and event log as if it had been charged there alone.
  // If any core would pass its budget, nothing is charged: ResourceExhausted for the first such
  // core. The handle is for release_all / retag_all; std::logic_error outside a Ledger.
  uint64_t charge_all(int64_t bytes, Category category, std::string_view owner, const Shape& shape,
                      const CoreShare& share, const Held& held);
  void release_all(uint64_t handle, const Held& held);
  void retag_all(uint64_t handle, Category category, const std::string& owner, const Held& held);

  void record_host_to_core(int64_t bytes);
  void record_core_to_host(int64_t bytes);
  void record_collective(int64_t sent_bytes, int64_t received_bytes);
  void record_flops(int64_t flops, bool recomputed);

  // Event log: off by default (a training run would grow it every step). While on, every charge,
  // release, retag and mark is appended in the order the ledger applied it.
  void record_events(bool on);
  void mark(std::string label);
  std::vector<LedgerEvent> events() const;

  int core() const { return core_; }
  int64_t capacity_bytes() const { return capacity_; }
  MemoryStat stat(Category category) const;
  MemoryStat total() const;
  TransferStat transfers() const;
  ComputeStat compute() const;
  // Largest first.
  std::vector<LiveAllocation> live_allocations() const;
  // Starts a new high-water mark at the current usage (per category and total).
  void reset_peaks();

 private:
  std::string exhausted_report(int64_t bytes, Category category, const std::string& owner,
                               const Shape& shape) const;
  void log(LedgerEventKind kind, uint64_t handle, const LiveAllocation& a, Category from);
  // The live allocation `handle` names, or nullptr (released, never charged here, or an all-core
  // record's handle).
  LiveAllocation* find_live(uint64_t handle);
  // This core's live allocations, its own and its share of the all-core records, largest first
  // (with the lock held).
  std::vector<LiveAllocation> sorted_live() const;
  LedgerCores& shared() const;  // std::logic_error outside a Ledger

  void check_held(const Held& held) const;

  const int core_;
  const int64_t capacity_;  // 0: no budget
  mutable std::mutex own_mu_;
  std::mutex& mu_;  // own_mu_, or the lock of the Ledger's cores
  LedgerCores* shared_ = nullptr;  // a Ledger's core: its cores and their all-core records
  std::array<MemoryStat, kNumCategories> stats_{};
  MemoryStat total_{};
  TransferStat transfers_{};
  ComputeStat compute_{};
  // Live allocations in slots reused once released, their owner and shape buffers with them: no
  // allocation per charge once a step's tensors have been seen. A handle is a slot's index and
  // generation, which moves on every reuse, so a stale handle finds nothing and no two charges of
  // a run share one.
  struct Slot {
    LiveAllocation a;
    uint32_t generation = 0;
    bool used = false;
  };
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  size_t live_count_ = 0;
  bool recording_ = false;
  std::vector<LedgerEvent> events_;
};

// One CoreLedger per core of a DeviceSpec. The cores share one lock and one lifetime: a mirrored
// tensor's charge on all of them takes the lock once and is one record (CoreLedger::charge_all, by
// device_hooks in framework/device/context.cc), and while one core's pointer lives, all do.
class Ledger {
 public:
  explicit Ledger(DeviceSpec spec);
  const DeviceSpec& spec() const { return spec_; }
  int num_cores() const { return static_cast<int>(cores_.size()); }
  CoreLedger& core(int i) { return *cores_.at(static_cast<size_t>(i)); }
  const CoreLedger& core(int i) const { return *cores_.at(static_cast<size_t>(i)); }
  // Shared so that a tensor's charge can tell whether its ledger still exists (StorageCharge).
  const std::shared_ptr<CoreLedger>& core_ptr(int i) const { return cores_.at(static_cast<size_t>(i)); }
  void reset_peaks();
  void record_events(bool on);  // on every core
  void mark(const std::string& label);  // the same label in every core's log

 private:
  DeviceSpec spec_;
  std::vector<std::shared_ptr<CoreLedger>> cores_;  // each aliases one shared LedgerCores
};

}  // namespace keel
