#include "framework/autodiff/tape.h"

#include <algorithm>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "framework/device/context.h"

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

// The result of backward for one input, added to what has accumulated for that tensor.
void accumulate(std::unordered_map<uint64_t, Tensor>& grads, uint64_t id, Tensor g) {
  auto it = grads.find(id);
  if (it == grads.end()) {
    grads.emplace(id, std::move(g));
    return;
  }
  // Out of place: either side may be a view of a gradient some other op still holds.
  Tensor sum = Tensor::empty(it->second.shape());
  if (!sum.is_abstract()) sum.array() = it->second.array() + g.array();
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

std::vector<Tensor> GradientTape::gradient(const Tensor& target, const std::vector<Tensor>& sources) {
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
  grads.emplace(target.id(), Tensor::full(target.shape(), 1.0f));

  // A tensor needs a gradient if it depends on a source: one forward pass over the record.
  std::unordered_set<uint64_t> needed(source_ids);
  for (const auto& e : entries_) {
    if (!e) continue;
    bool depends = false;
    for (uint64_t id : e->input_ids) depends = depends || (id != 0 && needed.count(id) > 0);
    if (depends) needed.insert(e->output_ids.begin(), e->output_ids.end());
  }

  for (size_t k = entries_.size(); k-- > 0;) {
    std::shared_ptr<Entry> entry = entries_[k];
    bool any = false;
    if (entry) {
      for (uint64_t id : entry->output_ids) any = any || grads.count(id) > 0;
    }
    if (!any) {
      if (!persistent_) entries_[k].reset();
      continue;
    }
    std::vector<Tensor> grad_outputs = take_output_gradients(grads, entry->output_ids, entry->output_shapes, source_ids);
    const std::vector<bool> needs_grad = inputs_needing_gradients(entry->input_ids, needed);
    std::vector<Tensor> input_grads;
    if (std::find(needs_grad.begin(), needs_grad.end(), true) != needs_grad.end()) {
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
  std::vector<Tensor> result = gradients_of(sources, grads);
  if (!persistent_) entries_.clear();
  return result;
}

std::vector<Tensor> GradientTape::gradient(const Tensor& target, const std::vector<Variable*>& variables) {
  std::vector<Tensor> sources;
  sources.reserve(variables.size());
  for (Variable* v : variables) sources.push_back(v->value());
  std::vector<Tensor> grads = gradient(target, sources);
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].defined()) grads[i].storage().retag(Category::gradients, "gradient:" + variables[i]->name());
  }
  return grads;
}

}  // namespace keel
