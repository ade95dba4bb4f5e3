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
  if (ctx.ledger != nullptr) {
    Ledger& ledger = *ctx.ledger;
    if (ctx.core >= 0) {
      const std::shared_ptr<CoreLedger>& core = ledger.core_ptr(ctx.core);
      charges.push_back({core, core->charge(bytes, category, owner, shape)});
    } else {
      charges.reserve(static_cast<size_t>(ledger.num_cores()));
      const int64_t elements = num_elements(shape);
      for (int c = 0; c < ledger.num_cores(); ++c) {
        const std::shared_ptr<CoreLedger>& core = ledger.core_ptr(c);
        if (ctx.shard_axis >= 0 && ctx.shard_axis < static_cast<int>(shape.size()) && elements > 0) {
          // Core c holds its block of the laid-out axis (shard_range of that axis), nothing else.
          thread_local Shape block;  // reused: a host program charges every tensor to every core
          block.assign(shape.begin(), shape.end());
          const size_t a = static_cast<size_t>(ctx.shard_axis);
          block[a] = shard_range(shape[a], ledger.num_cores(), c).size();
          const int64_t kept = num_elements(block);
          charges.push_back({core, core->charge(kept * (bytes / elements), category, owner, block)});
        } else if (ctx.sharded && elements > 0) {
          // Core c holds the elements shard_range gives it, and nothing else of this buffer.
          const int64_t shard = shard_range(elements, ledger.num_cores(), c).size();
          charges.push_back({core, core->charge(shard * (bytes / elements), category, owner, {shard})});
        } else {
          charges.push_back({core, core->charge(bytes, category, owner, shape)});
        }
      }
    }
  }
  return ctx.abstract;
}

void release(const StorageCharge& charge) {
  if (std::shared_ptr<CoreLedger> ledger = charge.ledger.lock()) ledger->release(charge.handle);
}

void retag(const StorageCharge& charge, Category category, const std::string& owner) {
  if (std::shared_ptr<CoreLedger> ledger = charge.ledger.lock()) ledger->retag(charge.handle, category, owner);
}

}  // namespace device_hooks
}  // namespace keel
