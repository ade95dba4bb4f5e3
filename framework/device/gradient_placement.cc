#include "framework/device/gradient_placement.h"

#include <utility>

#include "framework/core/fiber_locals.h"

namespace keel {
namespace {

// The scope's own copy: its slots are taken as they are used.
std::shared_ptr<GradientPlacement>& placement_of_thread() {
  thread_local std::shared_ptr<GradientPlacement> placement;
  return placement;
}
const FiberLocal<std::shared_ptr<GradientPlacement>, placement_of_thread> kPlacementFollowsTheReplica;

}  // namespace

const GradientPlacement* current_gradient_placement() { return placement_of_thread().get(); }

float* placed_gradient(uint64_t variable, int64_t elements) {
  GradientPlacement* placement = placement_of_thread().get();
  if (placement == nullptr || variable == 0) return nullptr;
  const auto it = placement->slots.find(variable);
  if (it == placement->slots.end() || it->second.elements != elements) return nullptr;
  float* memory = it->second.memory;
  placement->slots.erase(it);  // a second gradient of the variable in this pass goes elsewhere
  return memory;
}

GradientPlacementScope::GradientPlacementScope(std::shared_ptr<const GradientPlacement> placement)
    : saved_(std::exchange(placement_of_thread(),
                           placement != nullptr ? std::make_shared<GradientPlacement>(*placement) : nullptr)) {}

GradientPlacementScope::~GradientPlacementScope() { placement_of_thread() = std::move(saved_); }

}  // namespace keel
