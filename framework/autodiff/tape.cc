#include "framework/autodiff/tape.h"

#include <algorithm>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "framework/core/fiber_locals.h"
#include "framework/core/thread_pool.h"
#include "framework/device/context.h"
#include "framework/device/replica_context.h"

namespace keel {

// Inputs are kept by id only: holding them would keep alive tensors backward does not need.
struct GradientTape::Entry {
  std::vector<uint64_t> input_ids;  // 0 for an undefined input
  std::vector<uint64_t> output_ids;
  std::vector<Shape> output_shapes;
  BackwardFn backward;
  std::string owner;            // the layer that ran the op, for naming backward workspace
};

namespace {

std::vector<GradientTape*>& tape_stack() {
  thread_local std::vector<GradientTape*> stack;
  return stack;
}
// Each replica records on its own tapes, whichever host thread runs it (framework/core/fiber_locals.h).
const FiberLocal<std::vector<GradientTape*>, tape_stack> kTapesFollowTheReplica;

// out = a + b elementwise, in fixed blocks on the replica's share of the threads (a ResNet block's
// input gradient, its shortcut's and its residual branch's: up to 2 MB each at 32x32).
void add_on_threads(const float* a, const float* b, float* out, int64_t n) {
  constexpr int64_t kBlock = int64_t{1} << 15;
  parallel_for(
      (n + kBlock - 1) / kBlock,
      [&](int64_t block) {
        const int64_t end = std::min(n, (block + 1) * kBlock);
        for (int64_t i = block * kBlock; i < end; ++i) out[i] = a[i] + b[i];
      },
      threads_worth(static_cast<double>(n), kMinElementsPerThread));
}

// The result of backward for one input, added to what has accumulated for that tensor.
void accumulate(std::unordered_map<uint64_t, Tensor>& grads, uint64_t id, Tensor g) {
  auto it = grads.find(id);
  if (it == grads.end()) {
    grads.emplace(id, std::move(g));
    return;
  }
  if (ReplicaContext* ctx = current_replica_context()) {  // a product left to the all-reduce is added here
    ctx->materialize(it->second);
    ctx->materialize(g);
  }
  // Out of place: either side may be a view of a gradient some other op still holds.
  Tensor sum = Tensor::empty(it->second.shape());
  if (!sum.is_abstract()) add_on_threads(it->second.array().data(), g.array().data(), sum.array().data(), sum.size());
  it->second = std::move(sum);
}

// Takes `tape` off this thread's recording stack while it lives, then puts it back on top.
class PausedRecording {
 public:
  explicit PausedRecording(GradientTape* tape) : tape_(tape) {
    auto& stack = tape_stack();
    auto pos = std::find(stack.begin(), stack.end(), tape_);
    if (pos != stack.end()) stack.erase(pos);
  }
  ~PausedRecording() { tape_stack().push_back(tape_); }
  PausedRecording(const PausedRecording&) = delete;
  PausedRecording& operator=(const PausedRecording&) = delete;

 private:
  GradientTape* tape_;
};

// The gradients flowing into an op's outputs (zeros for an output nothing flowed into).
std::vector<Tensor> take_output_gradients(std::unordered_map<uint64_t, Tensor>& grads,
                                          const std::vector<uint64_t>& output_ids,
                                          const std::vector<Shape>& output_shapes,
                                          const std::unordered_set<uint64_t>& source_ids) {
  std::vector<Tensor> grad_outputs;
  grad_outputs.reserve(output_ids.size());
  for (size_t i = 0; i < output_ids.size(); ++i) {
    auto it = grads.find(output_ids[i]);
    grad_outputs.push_back(it != grads.end() ? it->second : Tensor::zeros(output_shapes[i]));
    // An output's gradient is consumed here unless the caller asked for it.
    if (it != grads.end() && !source_ids.count(output_ids[i])) grads.erase(it);
  }
  return grad_outputs;
}

// For each input id: whether it needs a gradient (0, an undefined input, never does).
std::vector<bool> inputs_needing_gradients(const std::vector<uint64_t>& input_ids,
                                           const std::unordered_set<uint64_t>& needed) {
  std::vector<bool> needs_grad(input_ids.size());
  for (size_t i = 0; i < input_ids.size(); ++i) needs_grad[i] = input_ids[i] != 0 && needed.count(input_ids[i]) > 0;
  return needs_grad;
}

// The accumulated gradient of each source; undefined for a source the target does not depend on.
std::vector<Tensor> gradients_of(const std::vector<Tensor>& sources, const std::unordered_map<uint64_t, Tensor>& grads) {
  std::vector<Tensor> result;
  result.reserve(sources.size());
  for (const Tensor& s : sources) {
    auto it = grads.find(s.id());
    result.push_back(it != grads.end() ? it->second : Tensor());
  }
  return result;
}

}  // namespace

GradientTape::GradientTape(bool persistent) : persistent_(persistent) { tape_stack().push_back(this); }

GradientTape::~GradientTape() {
  auto& stack = tape_stack();
  auto it = std::find(stack.rbegin(), stack.rend(), this);
  if (it != stack.rend()) stack.erase(std::next(it).base());
}

void GradientTape::watch(const Tensor& t) { watched_.insert(t.id()); }

bool GradientTape::depends_on(const Tensor& t) const {
  return t.defined() && (t.is_trainable_variable() || watched_.count(t.id()) > 0);
}

bool GradientTape::is_recording(std::initializer_list<const Tensor*> inputs) {
  for (GradientTape* tape : tape_stack()) {
    if (tape->used_ && !tape->persistent_) continue;
    for (const Tensor* t : inputs) {
      if (tape->depends_on(*t)) return true;
    }
  }
  return false;
}

void GradientTape::record(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                          BackwardFn backward) {
  std::shared_ptr<Entry> entry;
  for (GradientTape* tape : tape_stack()) {
    if (tape->used_ && !tape->persistent_) continue;
    bool depends = false;
    for (const Tensor& t : inputs) {
      if (tape->depends_on(t)) {
        depends = true;
        // A variable read inside the tape is watched from then on (watch_accessed_variables).
        tape->watched_.insert(t.id());
      }
    }
    if (!depends) continue;
    if (!entry) {
      entry = std::make_shared<Entry>();
      for (const Tensor& t : inputs) entry->input_ids.push_back(t.defined() ? t.id() : 0);
      for (const Tensor& t : outputs) {
        entry->output_ids.push_back(t.id());
        entry->output_shapes.push_back(t.shape());
      }
      entry->backward = std::move(backward);
      entry->owner = device_context().owner;
    }
    tape->add(entry);
  }
}

void GradientTape::add(const std::shared_ptr<Entry>& entry) {
  for (uint64_t id : entry->output_ids) watched_.insert(id);
  entries_.push_back(entry);
}

std::unordered_set<uint64_t> GradientTape::needing_gradients(const std::unordered_set<uint64_t>& source_ids,
                                                             std::unordered_map<uint64_t, size_t>& first_use) const {
  // A tensor needs a gradient if it depends on a source: one forward pass over the record. A
  // source's gradient is final once backward has run the earliest op that reads it.
  std::unordered_set<uint64_t> needed(source_ids);
  for (size_t k = 0; k < entries_.size(); ++k) {
    const auto& e = entries_[k];
    if (!e) continue;
    bool depends = false;
    for (uint64_t id : e->input_ids) {
      if (id == 0 || !needed.count(id)) continue;
      depends = true;
      if (source_ids.count(id)) first_use.emplace(id, k);
    }
    if (depends) needed.insert(e->output_ids.begin(), e->output_ids.end());
  }
  return needed;
}

namespace {

BackwardOwnerFn& backward_owner_fn() {
  thread_local BackwardOwnerFn fn;
  return fn;
}
const FiberLocal<BackwardOwnerFn, backward_owner_fn> kBackwardOwnerFollowsTheReplica;

}  // namespace

BackwardOwnerHook::BackwardOwnerHook(BackwardOwnerFn fn) : saved_(std::move(backward_owner_fn())) {
  backward_owner_fn() = std::move(fn);
}

BackwardOwnerHook::~BackwardOwnerHook() { backward_owner_fn() = std::move(saved_); }

GradientTape::StopRecording::StopRecording() { saved_.swap(tape_stack()); }

GradientTape::StopRecording::~StopRecording() {
  // Tapes created meanwhile are gone (they remove themselves); the saved ones go back below nothing.
  std::vector<GradientTape*>& stack = tape_stack();
  stack.insert(stack.begin(), saved_.begin(), saved_.end());
}

std::vector<Tensor> GradientTape::gradient(const Tensor& target, const std::vector<Tensor>& sources,
                                           const GradientReadyFn& on_ready, const Tensor& target_gradient) {
  if (used_ && !persistent_) {
    throw std::logic_error("GradientTape.gradient can only be called once on a non-persistent tape");
  }
  used_ = true;
  // Ops run while computing gradients are not recorded on this tape.
  const PausedRecording paused(this);

  CategoryScope category(Category::workspace);
  std::unordered_set<uint64_t> source_ids;
  for (const Tensor& s : sources) source_ids.insert(s.id());

  std::unordered_map<uint64_t, Tensor> grads;
  if (target_gradient.defined() && target_gradient.shape() != target.shape()) {
    throw std::invalid_argument("GradientTape.gradient: target gradient " + shape_string(target_gradient.shape()) +
                                " for a target " + shape_string(target.shape()));
  }
  grads.emplace(target.id(), target_gradient.defined() ? target_gradient : Tensor::full(target.shape(), 1.0f));

  std::unordered_map<uint64_t, size_t> first_use;
  const std::unordered_set<uint64_t> needed = needing_gradients(source_ids, first_use);
  // on_ready: the sources whose gradient is final after each entry, and those already passed.
  std::unordered_map<size_t, std::vector<size_t>> final_after;
  if (on_ready) {
    for (size_t i = 0; i < sources.size(); ++i) {
      if (auto it = first_use.find(sources[i].id()); it != first_use.end()) final_after[it->second].push_back(i);
    }
  }
  std::unordered_set<uint64_t> passed;  // by id: a source listed twice is one gradient, passed once
  auto pass = [&](size_t i) {
    auto it = grads.find(sources[i].id());
    if (it == grads.end() || !passed.insert(sources[i].id()).second) return;
    it->second = on_ready(i, std::move(it->second));
  };

  for (size_t k = entries_.size(); k-- > 0;) {
    run_backward(k, grads, source_ids, needed);
    if (auto it = final_after.find(k); it != final_after.end()) {
      for (size_t i : it->second) pass(i);
    }
  }
  backward_owner_token_.reset();
  backward_owner_.reset();
  if (on_ready) {
    for (size_t i = 0; i < sources.size(); ++i) pass(i);  // read by no op (the target itself)
  }
  std::vector<Tensor> result = gradients_of(sources, grads);
  if (!persistent_) entries_.clear();
  return result;
}

void GradientTape::run_backward(size_t k, std::unordered_map<uint64_t, Tensor>& grads,
                                const std::unordered_set<uint64_t>& source_ids, const std::unordered_set<uint64_t>& needed) {
  std::shared_ptr<Entry> entry = entries_[k];
  bool any = false;
  if (entry) {
    for (uint64_t id : entry->output_ids) any = any || grads.count(id) > 0;
  }
  if (!any) {
    if (!persistent_) entries_[k].reset();
    return;
  }
  std::vector<Tensor> grad_outputs = take_output_gradients(grads, entry->output_ids, entry->output_shapes, source_ids);
  const std::vector<bool> needs_grad = inputs_needing_gradients(entry->input_ids, needed);
  std::vector<Tensor> input_grads;
  if (std::find(needs_grad.begin(), needs_grad.end(), true) != needs_grad.end()) {
    if (backward_owner_fn() && backward_owner_ != entry->owner) {
      backward_owner_token_.reset();  // the previous owner's, before the next one's
      backward_owner_ = entry->owner;
      backward_owner_token_ = backward_owner_fn()(entry->owner);
    }
    OwnerScope owner("backward:" + entry->owner);
    input_grads = entry->backward(grad_outputs, needs_grad);
  }
  grad_outputs.clear();
  const std::vector<uint64_t> input_ids = entry->input_ids;
  if (!persistent_) {
    // Frees the saved tensors the closure captured.
    entries_[k].reset();
    entry.reset();
  }
  for (size_t i = 0; i < input_grads.size() && i < needs_grad.size(); ++i) {
    if (needs_grad[i] && input_grads[i].defined()) accumulate(grads, input_ids[i], std::move(input_grads[i]));
  }
}

std::vector<Tensor> GradientTape::gradient(const Tensor& target, const std::vector<Variable*>& variables,
                                           const GradientReadyFn& on_ready) {
  std::vector<Tensor> sources;
  sources.reserve(variables.size());
  for (Variable* v : variables) sources.push_back(v->value());
  std::vector<Tensor> grads = gradient(target, sources, on_ready);
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].defined()) grads[i].storage().retag(Category::gradients, "gradient:" + variables[i]->name());
  }
  return grads;
}

}  // namespace keel
