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
#include <string>
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

class GradientTape {
 public:
  explicit GradientTape(bool persistent = false);
  ~GradientTape();
  GradientTape(const GradientTape&) = delete;
  GradientTape& operator=(const GradientTape&) = delete;

  void watch(const Tensor& t);

  // d(target)/d(source) for each source. A source the target does not depend on gets an undefined
  // Tensor (TensorFlow's None). Results live on the current core, in the `workspace` category.
  std::vector<Tensor> gradient(const Tensor& target, const std::vector<Tensor>& sources);
  // The same for variables; the results are charged as `gradients`, owner "gradient:<variable>".
  std::vector<Tensor> gradient(const Tensor& target, const std::vector<Variable*>& variables);

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

  bool persistent_;
  bool used_ = false;
  std::unordered_set<uint64_t> watched_;  // ids of watched tensors and of recorded outputs
  std::vector<std::shared_ptr<Entry>> entries_;
};

}  // namespace keel
