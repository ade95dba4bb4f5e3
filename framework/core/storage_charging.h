// How tensor storage reaches the device's HBM ledger without core depending on device: core declares
// these functions and calls them for every new buffer; framework/device/context.cc defines them over
// the thread's DeviceContext and its Ledger. The library always holds both; only the direction of
// the includes is inverted, so that core stays the bottom of the stack.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "framework/core/shape.h"

namespace keel {

class CoreLedger;

// One core's charge for one buffer, or (`all_cores`) its charge on every core of a Ledger at once,
// one record (CoreLedger::charge_all) through the Ledger's core 0. The ledger is held weakly: a buffer
// may outlive the strategy whose ledger charged it (a layer kept after its model, which owned the
// strategy, is gone), and then there is nothing left to release it from. `core` is the charge's
// ledger, to be used only while `ledger` lives.
struct StorageCharge {
  std::weak_ptr<CoreLedger> ledger;
  uint64_t handle;
  CoreLedger* core = nullptr;
  bool all_cores = false;  // handle names a record of every core (release_all, retag_all)
};

namespace device_hooks {

// The thread's defaults for new tensors (DeviceContext::category / owner).
Category default_category();
const std::string& default_owner();
// Charges a new buffer of `bytes` as the thread's context says: nothing for host memory, one core,
// or every core for a mirrored tensor; each charge is appended to `charges` as soon as it is made, so
// that on ResourceExhausted the caller releases exactly those. Returns whether the context is
// abstract (the buffer gets no storage).
bool charge_new_storage(int64_t bytes, Category category, const std::string& owner, const Shape& shape,
                        std::vector<StorageCharge>& charges);
// Releases / re-charges a buffer's charges.
void release(std::span<const StorageCharge> charges);
void retag(std::span<const StorageCharge> charges, Category category, const std::string& owner);

}  // namespace device_hooks
}  // namespace keel
