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
  // Every core: one record (CoreLedger::charge_all), of each core's share where the context lays the
  // buffer out (shard_range of an axis, or of its elements).
  const int n = ledger.num_cores();
  const int64_t elements = num_elements(shape);
  CoreShare share;
  thread_local std::vector<int64_t> units;  // reused: a host program charges every tensor to every core
  if (ctx.shard_axis >= 0 && ctx.shard_axis < static_cast<int>(shape.size()) && elements > 0) {
    const size_t a = static_cast<size_t>(ctx.shard_axis);
    share = {CoreShare::Kind::axis_block, ctx.shard_axis, {}, (bytes / elements) * (elements / shape[a])};
    units.resize(static_cast<size_t>(n));
    for (int c = 0; c < n; ++c) units[static_cast<size_t>(c)] = shard_range(shape[a], n, c).size();
  } else if (ctx.sharded && elements > 0) {
    share = {CoreShare::Kind::flat, -1, {}, bytes / elements};
    units.resize(static_cast<size_t>(n));
    for (int c = 0; c < n; ++c) units[static_cast<size_t>(c)] = shard_range(elements, n, c).size();
  }
  if (share.kind != CoreShare::Kind::whole) share.units = units;
  charges.reserve(charges.size() + 1);  // nothing to throw between the charge and its record here
  const std::shared_ptr<CoreLedger>& first = ledger.core_ptr(0);
  const CoreLedger::Held held = first->hold();  // every core's: they share it
  charges.push_back({first, first->charge_all(bytes, category, owner, shape, share, held), first.get(), true});
  return ctx.abstract;
}

namespace {

// Runs `fn(charge, held)` on each charge whose ledger is alive, under its lock.
template <class Fn>
void for_each_held(std::span<const StorageCharge> charges, Fn fn) {
  for (const StorageCharge& c : charges) {
    if (const std::shared_ptr<CoreLedger> alive = c.ledger.lock()) fn(c, alive->hold());
  }
}

}  // namespace

void release(std::span<const StorageCharge> charges) {
  for_each_held(charges, [](const StorageCharge& c, const CoreLedger::Held& held) {
    if (c.all_cores) {
      c.core->release_all(c.handle, held);
    } else {
      c.core->release(c.handle, held);
    }
  });
}

void retag(std::span<const StorageCharge> charges, Category category, const std::string& owner) {
  for_each_held(charges, [&](const StorageCharge& c, const CoreLedger::Held& held) {
    if (c.all_cores) {
      c.core->retag_all(c.handle, category, owner, held);
    } else {
      c.core->retag(c.handle, category, owner, held);
    }
  });
}

}  // namespace device_hooks
}  // namespace keel
