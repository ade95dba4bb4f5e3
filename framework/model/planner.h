// The memory planner: runs one real training step of the real model on abstract tensors (shapes and
// ledger charges, no storage) through the same code path as training, so the plan equals what a real
// step records, by construction. The planned step is a steady-state one of fit(): the optimizer's
// slots exist before it starts, as they do for every step after the first, and the next step's batch
// is already in each core's prefetch slot (so `inputs` holds two batches).
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "framework/device/device_spec.h"
#include "framework/device/layout.h"
#include "framework/device/ledger.h"
#include "framework/device/sharding.h"
#include "framework/layers/dtype_policy.h"
#include "framework/model/model.h"

namespace keel {

struct CoreMemory {
  int core = 0;
  std::array<int64_t, kNumCategories> category_peak{};  // high-water mark of each category
  int64_t peak = 0;                                    // high-water mark of the sum
  // Collectives of one training step (gradients, replica-local state): bytes sent to and received
  // from other cores.
  int64_t sent_bytes = 0;
  int64_t received_bytes = 0;
  // The step's forward products and convolutions (ComputeStat): all, and those remat recomputed.
  int64_t forward_flops = 0;
  int64_t recomputed_flops = 0;
};

// The memory savers a step runs with (DESIGN.md 2b); each is planned exactly like everything else,
// through the same step code.
struct Savers {
  ShardingMode shard = ShardingMode::none;  // partitioned optimizer state and gradients (ZeRO)
  Remat remat = Remat::none;                // rematerialisation (framework/model/remat.h)
  // The global dtype policy the planner builds the model under (framework/layers/dtype_policy.h).
  mixed_precision::Policy precision = mixed_precision::Policy("float32");
  // Explicit placement (framework/device/layout.h): not a saver --suggest picks, but planned as run.
  std::shared_ptr<const distribution::LayoutMap> layout = nullptr;
};

struct MemoryPlan {
  DeviceSpec device;
  Savers savers;
  int64_t batch_per_core = 0;
  bool fits = false;
  std::vector<CoreMemory> per_core;
  std::optional<int64_t> max_batch_per_core;  // filled by find_max_batch
  // With PlanDetail::timeline: each core's ledger event log of the planned step, from the first
  // variable built. Marks begin its phases: "build", "prefetch" (the next batch's slot), "train_step"
  // (the step's infeed), then train_step's own "forward", "backward", "apply_gradients" (all-reduce
  // and update). Replayed, it reaches exactly the peaks above, because they are the same ledger's.
  std::vector<std::vector<LedgerEvent>> timeline;
};

enum class PlanDetail { figures, timeline };

// Builds and compiles the model to plan, in the current scope (called inside the planner's strategy).
using ModelFactory = std::function<std::unique_ptr<Model>()>;

// Per-core figures of `strategy`'s ledger, as the planner reports them.
std::vector<CoreMemory> core_memory(const Ledger& ledger);

// One training step at `batch_per_core` on every core of `device`. `label_shape` excludes the batch
// (empty for class ids, {classes} for one-hot). Nothing is allocated but bookkeeping.
MemoryPlan plan_training_step(const ModelFactory& factory, const DeviceSpec& device, int64_t batch_per_core,
                              const Shape& label_shape, const Savers& savers = {},
                              PlanDetail detail = PlanDetail::figures);

// The same step against every core's budget, before anything real exists: throws ResourceExhausted,
// with the ledger's report, at the allocation where a training step would run out; returns if it
// fits (always, on a device without a budget). Nothing is allocated but bookkeeping.
void check_training_step_fits(const ModelFactory& factory, const DeviceSpec& device, int64_t batch_per_core,
                              const Shape& label_shape, const Savers& savers = {});

// The largest per-core batch (at most kMaxBatchPerCore) whose training step fits every core's budget
// (0 if even 1 does not). Requires a device with a budget.
int64_t find_max_batch(const ModelFactory& factory, const DeviceSpec& device, const Shape& label_shape,
                       const Savers& savers = {});

// One combination of savers for `keel memory --suggest`: what a step needs with it, and its cost.
struct SaverSuggestion {
  Savers savers;
  int64_t peak_bytes = 0;       // the largest core's peak at the asked batch
  bool fits = false;            // at the asked batch, on every core
  std::optional<int64_t> max_batch_per_core;  // the largest per-core batch that fits (device with a budget)
  // Remat's recomputed FLOPs as a fraction of the step without them: recomputed forward FLOPs over
  // the first pass's times 3 (backward counted as twice the forward, as for products and convolutions).
  double recompute_fraction = 0.0;
  int64_t collective_bytes = 0;               // bytes sent between cores in one step, summed over cores
};

// Every combination of the savers keel has (precisions x sharding modes x remat modes), planned at
// `batch_per_core`: those that fit first, cheapest first (least recomputation, then fewest bytes
// between cores, then float32 before mixed_bfloat16, then the smallest peak), then those that do not
// fit, smallest peak first.
std::vector<SaverSuggestion> suggest_savers(const ModelFactory& factory, const DeviceSpec& device, int64_t batch_per_core,
                                            const Shape& label_shape);

}  // namespace keel
