#include "framework/device/context.h"

#include "framework/core/fiber_locals.h"
#include "framework/core/storage_charging.h"
#include "framework/device/collectives.h"
#include "framework/device/ledger.h"

namespace keel {

DeviceContext& device_context() {
  thread_local DeviceContext ctx;
  return ctx;
}

namespace {
// A replica's context (its core, category, owner), whichever host thread runs it.
const FiberLocal<DeviceContext, device_context> kContextFollowsTheReplica;
}  // namespace

namespace device_hooks {

Category default_category() { return device_context().category; }

const std::string& default_owner() { return device_context().owner; }

bool charge_new_storage(int64_t bytes, Category category, const std::string& owner, const Shape& shape,
                        std::vector<StorageCharge>& charges) {
  const DeviceContext& ctx = device_context();
  if (ctx.ledger == nullptr) return ctx.abstract;
  Ledger& ledger = *ctx.ledger;
  if (ctx.core >= 0) {
    const std::shared_ptr<CoreLedger>& core = ledger.core_ptr(ctx.core);
    charges.push_back({core, core->charge(bytes, category, owner, shape), core.get()});
    return ctx.abstract;
  }
  charges.reserve(static_cast<size_t>(ledger.num_cores()));
  const int64_t elements = num_elements(shape);
  const CoreLedger::Held held = ledger.core(0).hold();  // every core's: they share it
  for (int c = 0; c < ledger.num_cores(); ++c) {
    const std::shared_ptr<CoreLedger>& core = ledger.core_ptr(c);
    uint64_t handle = 0;
    if (ctx.shard_axis >= 0 && ctx.shard_axis < static_cast<int>(shape.size()) && elements > 0) {
      // Core c holds its block of the laid-out axis (shard_range of that axis), nothing else.
      thread_local Shape block;  // reused: a host program charges every tensor to every core
      block.assign(shape.begin(), shape.end());
      const size_t a = static_cast<size_t>(ctx.shard_axis);
      block[a] = shard_range(shape[a], ledger.num_cores(), c).size();
      handle = core->charge(num_elements(block) * (bytes / elements), category, owner, block, held);
    } else if (ctx.sharded && elements > 0) {
      // Core c holds the elements shard_range gives it, and nothing else of this buffer.
      const int64_t shard = shard_range(elements, ledger.num_cores(), c).size();
      handle = core->charge(shard * (bytes / elements), category, owner, {shard}, held);
    } else {
      handle = core->charge(bytes, category, owner, shape, held);
    }
    if (c == 0) {
      charges.push_back({core, handle, core.get()});
    } else {
      charges.push_back({{}, handle, core.get(), /*with_previous=*/true});  // no weak count to move: core 0's
    }
  }
  return ctx.abstract;
}

namespace {

// Runs `fn(charge, held)` on each charge whose ledger is alive, taking its lock once for a charge
// and those charged with it on the other cores of its Ledger.
template <class Fn>
void for_each_held(std::span<const StorageCharge> charges, Fn fn) {
  for (size_t i = 0; i < charges.size();) {
    size_t end = i + 1;
    while (end < charges.size() && charges[end].with_previous) ++end;
    if (const std::shared_ptr<CoreLedger> alive = charges[i].ledger.lock()) {
      const CoreLedger::Held held = alive->hold();
      for (size_t j = i; j < end; ++j) fn(charges[j], held);
    }
    i = end;
  }
}

}  // namespace

void release(std::span<const StorageCharge> charges) {
  for_each_held(charges, [](const StorageCharge& c, const CoreLedger::Held& held) { c.core->release(c.handle, held); });
}

void retag(std::span<const StorageCharge> charges, Category category, const std::string& owner) {
  for_each_held(charges, [&](const StorageCharge& c, const CoreLedger::Held& held) {
    c.core->retag(c.handle, category, owner, held);
  });
}

}  // namespace device_hooks
}  // namespace keel
