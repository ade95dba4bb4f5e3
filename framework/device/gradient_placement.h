// Where a replica's backward writes some variables' gradients: straight into the memory the step's
// all-reduce reads them from. Under mpirun on one machine that is the process's gradient arena in
// MPI-3 shared memory (InProcessCollectives::gradient_arena_plan, ProcessGroup::
// allocate_gradient_arena): the other processes sum their ranges of the gradients there, and the
// copy of those ranges into the process's segment is gone.
//
// The optimizer makes a placement from the plan its last all-reduce left (Optimizer::
// gradient_placement) and the training step installs it on the replica that leads its process for
// the backward pass (GradientPlacementScope). A variable's gradient buffer (ops::detail::grad_buffer)
// then goes to the memory its variable is listed with, charged to the ledger as any gradient:
// only where the bytes live changes, never the numbers. Keyed by the storage id of the variable's
// value; a gradient of another size, or of a variable not listed, is allocated as usual, and so is a
// second gradient of the same variable in one backward pass (a layer used twice: its gradients are
// added, into a tensor of their own).
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>

namespace keel {

struct GradientPlacement {
  struct Slot {
    float* memory = nullptr;
    int64_t elements = 0;
  };
  std::unordered_map<uint64_t, Slot> slots;  // by the variable value's Storage::id()
};

// This replica's placement (it follows the replica across fibers), or nullptr.
const GradientPlacement* current_gradient_placement();
// Where `elements` floats of the gradient of the variable whose value has storage id `variable`
// go, or nullptr; the slot is then taken for the rest of the scope.
float* placed_gradient(uint64_t variable, int64_t elements);

// RAII: installs a copy of `placement` (may be null) for this replica, restores the previous one after.
class GradientPlacementScope {
 public:
  explicit GradientPlacementScope(std::shared_ptr<const GradientPlacement> placement);
  ~GradientPlacementScope();
  GradientPlacementScope(const GradientPlacementScope&) = delete;
  GradientPlacementScope& operator=(const GradientPlacementScope&) = delete;

 private:
  std::shared_ptr<GradientPlacement> saved_;
};

}  // namespace keel
