// GradientTape: records differentiable ops executed while it is active, then walks them in reverse.
//
// An op records its inputs, outputs and a backward closure that captures exactly what backward
// needs (its saved tensors: charged as `activations`, freed as soon as the closure has run on a
// non-persistent tape). Trainable variables are watched automatically; other tensors with watch().
// Each thread has its own stack of active tapes, so each replica thread records its own graph.
// gradient() is iterative (no recursion), so depth does not grow the stack.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "framework/autodiff/variable.h"
#include "framework/core/tensor.h"

namespace keel {

// Given d(target)/d(output) for every output (zeros where none flows), returns d(target)/d(input)
// for every input whose needs_grad is true (undefined Tensor elsewhere). Results are new tensors or
// views of grad_outputs; the tape never writes into what backward returns.
using BackwardFn =
    std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs, const std::vector<bool>& needs_grad)>;

// Called by GradientTape::gradient as soon as backward has finished the gradient of
// sources[index] (no recorded op can add to it any more), in an order that depends on the recorded
// ops alone (the same on every replica of a step); what it returns is kept as that gradient. This is
// where ZeRO-2 reduce-scatters each gradient while backward goes on.
using GradientReadyFn = std::function<Tensor(size_t index, Tensor gradient)>;

// Called by every tape on this thread as backward moves on to the ops of another owner (the layer
// that ran them: "activation:<layer>"; "" outside any); what it returns is held until backward moves
// on again. Every replica of a step sees the same sequence. ZeRO-3 gathers a layer's weights here.
using BackwardOwnerFn = std::function<std::shared_ptr<void>(const std::string& owner)>;

// RAII: installs `fn` as this thread's BackwardOwnerFn while it lives.
class BackwardOwnerHook {
 public:
  explicit BackwardOwnerHook(BackwardOwnerFn fn);
  ~BackwardOwnerHook();
  BackwardOwnerHook(const BackwardOwnerHook&) = delete;
  BackwardOwnerHook& operator=(const BackwardOwnerHook&) = delete;

 private:
  BackwardOwnerFn saved_;
};

class GradientTape {
 public:
  // RAII: while it lives, no tape on this thread records (ops run as outside any tape); the tapes
  // that were active record again afterwards.
  class StopRecording {
   public:
    StopRecording();
    ~StopRecording();
    StopRecording(const StopRecording&) = delete;
    StopRecording& operator=(const StopRecording&) = delete;

   private:
    std::vector<GradientTape*> saved_;
  };

  explicit GradientTape(bool persistent = false);
  ~GradientTape();
  GradientTape(const GradientTape&) = delete;
  GradientTape& operator=(const GradientTape&) = delete;

  void watch(const Tensor& t);

  // d(target)/d(source) for each source. A source the target does not depend on gets an undefined
  // Tensor (TensorFlow's None). Results live on the current core, in the `workspace` category.
  // With `on_ready`, each defined gradient passes through it once, when it is final. With
  // `target_gradient` (target's shape), backward starts from it instead of ones (a vector-Jacobian
  // product, as TensorFlow's output_gradients).
  std::vector<Tensor> gradient(const Tensor& target, const std::vector<Tensor>& sources,
                               const GradientReadyFn& on_ready = nullptr, const Tensor& target_gradient = Tensor());
  // The same for variables; the results are charged as `gradients`, owner "gradient:<variable>".
  std::vector<Tensor> gradient(const Tensor& target, const std::vector<Variable*>& variables,
                               const GradientReadyFn& on_ready = nullptr);

  // For ops: true if some active tape on this thread depends on one of `inputs`.
  static bool is_recording(std::initializer_list<const Tensor*> inputs);
  // For ops: records on every active tape that depends on one of `inputs`.
  static void record(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs, BackwardFn backward);

  // Bytes held by saved tensors is visible in the ledger; this counts recorded ops (for tests).
  size_t num_recorded_ops() const { return entries_.size(); }

 private:
  struct Entry;
  bool depends_on(const Tensor& t) const;
  void add(const std::shared_ptr<Entry>& entry);
  // The ids that need a gradient; fills first_use with each source's earliest reading entry.
  std::unordered_set<uint64_t> needing_gradients(const std::unordered_set<uint64_t>& source_ids,
                                                 std::unordered_map<uint64_t, size_t>& first_use) const;
  // Runs entry k's backward on the gradients of its outputs and adds the results into `grads`.
  void run_backward(size_t k, std::unordered_map<uint64_t, Tensor>& grads, const std::unordered_set<uint64_t>& source_ids,
                    const std::unordered_set<uint64_t>& needed);

  bool persistent_;
  bool used_ = false;
  // While gradient() runs: the owner whose ops backward is running, and what the hook returned.
  std::optional<std::string> backward_owner_;  // none before the first op's backward
  std::shared_ptr<void> backward_owner_token_;
  std::unordered_set<uint64_t> watched_;  // ids of watched tensors and of recorded outputs
  std::vector<std::shared_ptr<Entry>> entries_;
};

}  // namespace keel
