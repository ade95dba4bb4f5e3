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
#include "framework/device/ledger.h"
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
};

struct MemoryPlan {
  DeviceSpec device;
  int64_t batch_per_core = 0;
  bool fits = false;
  std::vector<CoreMemory> per_core;
  std::optional<int64_t> max_batch_per_core;  // filled by find_max_batch
};

// Builds and compiles the model to plan, in the current scope (called inside the planner's strategy).
using ModelFactory = std::function<std::unique_ptr<Model>()>;

// Per-core figures of `strategy`'s ledger, as the planner reports them.
std::vector<CoreMemory> core_memory(const Ledger& ledger);

// One training step at `batch_per_core` on every core of `device`. `label_shape` excludes the batch
// (empty for class ids, {classes} for one-hot). Nothing is allocated but bookkeeping.
MemoryPlan plan_training_step(const ModelFactory& factory, const DeviceSpec& device, int64_t batch_per_core,
                              const Shape& label_shape);

// The same step against every core's budget, before anything real exists: throws ResourceExhausted,
// with the ledger's report, at the allocation where a training step would run out; returns if it
// fits (always, on a device without a budget). Nothing is allocated but bookkeeping.
void check_training_step_fits(const ModelFactory& factory, const DeviceSpec& device, int64_t batch_per_core,
                              const Shape& label_shape);

// The largest per-core batch (at most kMaxBatchPerCore) whose training step fits every core's budget
// (0 if even 1 does not). Requires a device with a budget.
int64_t find_max_batch(const ModelFactory& factory, const DeviceSpec& device, const Shape& label_shape);

}  // namespace keel
