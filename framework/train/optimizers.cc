#include "framework/train/optimizers.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <stdexcept>

#include "framework/core/finite.h"
#include "framework/core/limits.h"
#include "framework/core/thread_pool.h"
#include "framework/device/context.h"
#include "framework/device/replica_context.h"
#include "framework/device/strategy.h"

namespace keel {

CosineDecay::CosineDecay(float initial_learning_rate, int64_t decay_steps, float alpha)
    : initial_(initial_learning_rate), decay_steps_(decay_steps), alpha_(alpha) {
  if (decay_steps_ <= 0) throw std::invalid_argument("CosineDecay: decay_steps must be positive");
}

float CosineDecay::operator()(int64_t step) const {
  const double progress = static_cast<double>(std::min(step, decay_steps_)) / static_cast<double>(decay_steps_);
  const double cosine = 0.5 * (1.0 + std::cos(3.14159265358979323846 * progress));
  return static_cast<float>(initial_ * ((1.0 - alpha_) * cosine + alpha_));
}

nlohmann::json CosineDecay::get_config() const {
  return {{"class_name", "CosineDecay"},
          {"config", {{"initial_learning_rate", initial_}, {"decay_steps", decay_steps_}, {"alpha", alpha_}}}};
}

namespace {

// Inside a run, a variable a LayoutMap splits: its gradients and updates are per block.
bool laid_out(const Variable* v, const ReplicaContext* ctx) { return ctx != nullptr && v->sharded_axis() >= 0; }
bool any_laid_out(const std::vector<Variable*>& vars, const ReplicaContext* ctx) {
  return std::any_of(vars.begin(), vars.end(), [ctx](const Variable* v) { return laid_out(v, ctx); });
}

// A laid-out variable seen as (outer, dim, inner) around its split axis, and replica's range of dim.
struct Block {
  int64_t outer = 1, dim = 1, inner = 1;
  ShardRange range;
};
Block block_of(const Variable& v, int replicas, int replica) {
  const Shape& shape = v.shape();
  const size_t axis = static_cast<size_t>(v.sharded_axis());
  Block b;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d < axis) b.outer *= shape[d];
    if (d > axis) b.inner *= shape[d];
  }
  b.dim = shape[axis];
  b.range = shard_range(b.dim, replicas, replica);
  return b;
}
Shape block_shape(const Variable& v, int replicas, int replica) {
  Shape shape = v.shape();
  shape[static_cast<size_t>(v.sharded_axis())] = block_of(v, replicas, replica).range.size();
  return shape;
}

// The block of the mean from a stack (replicas, block...) of every replica's gradient: summed in the
// collectives' tree order and divided as all_reduce's mean divides, charged as `gradients`.
Tensor reduce_stack(const Tensor& stack, const Variable& v, int replicas, int replica) {
  Shape expected = block_shape(v, replicas, replica);
  expected.insert(expected.begin(), replicas);
  if (stack.shape() != expected) {
    throw std::invalid_argument("apply_gradients: gradient " + shape_string(stack.shape()) + " for variable '" + v.name() +
                                "', laid out across the cores (its stack of every replica's block: " + shape_string(expected) + ")");
  }
  const CategoryScope as_gradient(Category::gradients, "gradient:" + v.name());
  Tensor block = Tensor::empty(Shape(stack.shape().begin() + 1, stack.shape().end()));
  if (block.is_abstract() || block.size() == 0) return block;
  const int64_t size = block.size();
  std::vector<const float*> in;
  for (int r = 0; r < replicas; ++r) in.push_back(stack.data() + r * size);
  constexpr int64_t kPiece = int64_t{1} << 15;
  parallel_for(
      (size + kPiece - 1) / kPiece,
      [&](int64_t p) {
        const int64_t begin = p * kPiece, end = std::min(size, begin + kPiece);
        std::vector<const float*> at(in);
        for (const float*& ptr : at) ptr += begin;
        float* sum = block.data() + begin;
        tree_sum(at, sum, end - begin);
        const float n = static_cast<float>(replicas);
        for (int64_t e = 0; e < end - begin; ++e) sum[e] /= n;
      },
      threads_worth(static_cast<double>(size) * replicas, kMinElementsPerThread));
  return block;
}

}  // namespace

GradientReadyFn reduce_laid_out_as_ready(const std::vector<Variable*>& vars, GradientReadyFn next) {
  const ReplicaContext* ctx = current_replica_context();
  if (!any_laid_out(vars, ctx)) return next;
  return [vars, next = std::move(next), replicas = ctx->num_replicas(), replica = ctx->replica_id()](size_t index, Tensor gradient) {
    const Variable& v = *vars.at(index);
    if (v.sharded_axis() < 0) return next ? next(index, std::move(gradient)) : gradient;
    return gradient.rank() == v.value().rank() + 1 ? reduce_stack(gradient, v, replicas, replica) : gradient;
  };
}

namespace {

// Whether `count` floats are all finite, in pieces on this thread's share of the threads.
bool all_finite_in_pieces(const float* values, int64_t count) {
  constexpr int64_t kPiece = int64_t{1} << 16;
  std::atomic<bool> finite{true};
  parallel_for(
      (count + kPiece - 1) / kPiece,
      [&](int64_t p) {
        if (!all_finite(values + p * kPiece, std::min(kPiece, count - p * kPiece))) finite.store(false, std::memory_order_relaxed);
      },
      threads_worth(static_cast<double>(count), kMinElementsPerThread));
  return finite.load(std::memory_order_relaxed);
}

}  // namespace

GradientReadyFn GradientCheck::hook(GradientReadyFn next) {
  return [this, next = std::move(next)](size_t index, Tensor gradient) {
    if (index < first_ && gradient.defined() && !gradient.is_abstract() && !all_finite_in_pieces(gradient.data(), gradient.size())) {
      first_ = index;
    }
    return next ? next(index, std::move(gradient)) : gradient;
  };
}

void Optimizer::append_block_spans(Variable* var, const Tensor& grad, int replica, int replicas,
                                   std::vector<UpdateSpan>& spans) const {
  const Block b = block_of(*var, replicas, replica);
  const int64_t run = b.range.size() * b.inner;
  const std::vector<Variable*>& slots = slots_.at(var->name());
  for (int64_t o = 0; o < b.outer && run > 0; ++o) {
    const int64_t at = (o * b.dim + b.range.begin) * b.inner;
    UpdateSpan span;
    span.size = run;
    span.variable = var->mutable_value().data() + at;
    span.gradient = grad.data() + o * run;
    for (size_t k = 0; k < slots.size(); ++k) span.slots[k] = slots[k]->mutable_value().data() + at;
    spans.push_back(span);
  }
}

size_t Optimizer::first_non_finite_block(const std::vector<Tensor>& grads, const std::vector<Variable*>& vars, int replicas) {
  ReplicaContext* ctx = current_replica_context();
  size_t mine = vars.size();
  for (size_t i = 0; i < vars.size() && mine == vars.size(); ++i) {
    const Tensor& g = grads[i];
    if (laid_out(vars[i], ctx) && g.defined() && !g.is_abstract() && !all_finite(g.data(), g.size())) mine = i;
  }
  if (replicas == 1) return mine;
  return static_cast<size_t>(ctx->all_reduce_min(static_cast<int64_t>(mine)));
}

Optimizer::Optimizer(std::string name, float learning_rate, float weight_decay)
    : name_(std::move(name)), learning_rate_(learning_rate), weight_decay_(weight_decay) {
  if (!(std::isfinite(learning_rate) && learning_rate > 0.0f)) {
    throw std::invalid_argument("the learning rate must be finite and positive, got " + std::to_string(learning_rate));
  }
  if (!(std::isfinite(weight_decay) && weight_decay >= 0.0f)) {
    throw std::invalid_argument("the weight decay must be finite and non-negative, got " + std::to_string(weight_decay));
  }
}

// Slots are created once, mirrored or sharded, by one replica (TensorFlow's merge_call); every
// replica reads the same sizes, since only a merge_call changes them.
void Optimizer::build_once(const std::vector<Variable*>& vars, ReplicaContext* ctx) {
  if (built()) return;
  auto create = [&] { build(vars); };
  if (ctx != nullptr) {
    ctx->merge_call(create);
  } else {
    create();
  }
}

GradientUpdate Optimizer::apply_gradients(std::vector<Tensor> grads, const std::vector<Variable*>& vars,
                                          GradientForm form, const GradientCheck* checked) {
  if (grads.size() != vars.size()) {
    throw std::invalid_argument("apply_gradients: " + std::to_string(grads.size()) + " gradients for " +
                                std::to_string(vars.size()) + " variables");
  }
  ReplicaContext* ctx = current_replica_context();
  const int replica = ctx != nullptr ? ctx->replica_id() : 0;
  const int replicas = ctx != nullptr ? ctx->num_replicas() : 1;
  build_once(vars, ctx);
  for (size_t i = 0; i < grads.size(); ++i) {  // a LayoutMap's variables: stacks backward left, reduced here
    if (laid_out(vars[i], ctx) && grads[i].defined() && grads[i].rank() == vars[i]->value().rank() + 1) {
      grads[i] = reduce_stack(grads[i], *vars[i], replicas, replica);
    }
  }
  check(grads, vars, form, replica, replicas);
  // Every replica reads the step before the reduction's first barrier; replica 0 advances it before
  // the last barrier below, so a following apply_gradients in the same run reads the new value.
  const int64_t step = iterations_ + 1;
  // Unsharded in one process, the replicas split the update between them. Reset before the
  // reduction's first barrier, which every replica passes after the last update took its pieces.
  const bool split_in_process = ctx != nullptr && !ctx->strategy().updates_slice_shards();
  if (split_in_process && ctx->leads_process()) next_piece_.store(0, std::memory_order_relaxed);
  std::optional<size_t> voted;  // the first variable whose gradient is not finite, if the reduction said
  std::vector<const float*> means(vars.size());
  const bool shards = reduce(grads, vars, form, voted, means);
  // One replica's gradients checked as backward finished them: the same verdict without the pass.
  const bool prechecked = checked != nullptr && replicas == 1 && !shards && checked->variables() == vars.size();
  size_t bad = voted ? *voted : prechecked ? checked->first_non_finite() : first_non_finite(grads, vars, shards, replica, replicas);
  if (any_laid_out(vars, ctx)) bad = std::min(bad, first_non_finite_block(grads, vars, replicas));
  if (bad < vars.size()) return GradientUpdate{false, vars[bad]->name()};
  // Each replica updates its shard of every variable; with sharded slots that is all it holds of them.
  // Unsharded in one process, its replicas split each variable between them: where every mean is
  // the one in-process sum they all read, in pieces each takes as it comes (update_in_pieces), else a
  // shard each.
  const bool taken = split_in_process && replicas > 1 && ctx->strategy().local_replicas() == replicas && !shards &&
                     means_are_shared(grads, vars, means, ctx);
  const int updater = split_in_process ? replica - ctx->strategy().first_local_replica() : replica;
  const int updaters = taken ? 1 : split_in_process ? ctx->strategy().local_replicas() : replicas;
  std::vector<Tensor> updated(vars.size());
  std::vector<UpdateSpan> spans;
  for (size_t i = 0; i < vars.size(); ++i) {
    if (!grads[i].defined()) continue;
    updated[i] = vars[i]->value();
    if (updated[i].is_abstract()) continue;
    if (laid_out(vars[i], ctx)) {
      append_block_spans(vars[i], grads[i], replica, replicas, spans);  // every core its own block
    } else {
      spans.push_back(span_of(vars[i], means[i] != nullptr ? means[i] : grads[i].data(), shards, taken ? 0 : updater, updaters));
    }
  }
  update_in_pieces(spans, step, taken);
  if (ctx == nullptr || ctx->leads_process()) iterations_ = step;
  if (replicas > 1) share_update(*ctx, updated);
  return GradientUpdate{};
}

GradientUpdate Optimizer::apply_replica_means(const std::vector<Tensor>& means, const std::vector<Variable*>& vars,
                                              ReplicatedStrategy& strategy, const GradientCheck* checked) {
  if (means.size() != vars.size()) {
    throw std::invalid_argument("apply_replica_means: " + std::to_string(means.size()) + " gradients for " +
                                std::to_string(vars.size()) + " variables");
  }
  if (current_replica_context() != nullptr) throw std::logic_error("apply_replica_means: inside a run, use apply_gradients");
  if (!built()) {
    const ContextScope mirrored(strategy.mirrored_context());  // as merge_call creates them
    build(vars);
  }
  check(means, vars, GradientForm::local, 0, 1);
  const int64_t step = iterations_ + 1;
  strategy.record_host_all_reduce(means);
  const size_t bad = checked != nullptr && checked->variables() == vars.size() ? checked->first_non_finite()
                                                                               : first_non_finite(means, vars, false, 0, 1);
  if (bad < vars.size()) return GradientUpdate{false, vars[bad]->name()};
  std::vector<UpdateSpan> spans;
  for (size_t i = 0; i < vars.size(); ++i) {
    if (means[i].defined() && !vars[i]->value().is_abstract()) spans.push_back(span_of(vars[i], means[i].data(), false, 0, 1));
  }
  update_in_pieces(spans, step);
  iterations_ = step;
  return GradientUpdate{};
}

void Optimizer::share_update(ReplicaContext& ctx, std::vector<Tensor>& updated) {
  const ShardingMode shard = ctx.strategy().shard();
  if (shard == ShardingMode::optimizer || shard == ShardingMode::gradients) {
    ctx.all_gather_shards(updated);  // every core's parameters get every shard (ends with a barrier)
  } else if (shard == ShardingMode::none && ctx.strategy().updates_slice_shards()) {
    ctx.share_process_shards(updated);  // each process's copy gets the others' shards (a barrier)
  } else if (!ctx.update_ends_run() || ctx.strategy().local_replicas() != ctx.num_replicas()) {
    // none: every core updates its whole copy; full: parameters stay sharded until a layer gathers
    // them. Either way every shard is written before any replica reads one: here, or in one process
    // when the update ends the run, by the run's end (ReplicaContext::set_update_ends_run).
    ctx.barrier();
  }
}

namespace {

Tensor reduce_scatter_gradient(const ReplicaContext& ctx, const Tensor& grad, const std::string& variable) {
  CategoryScope as_gradient(Category::gradients, "gradient:" + variable);
  return ctx.reduce_scatter(ReduceOp::Mean, grad);
}

}  // namespace

GradientReadyFn reduce_scatter_as_ready(const std::vector<Variable*>& vars) {
  ReplicaContext* ctx = current_replica_context();
  if (ctx == nullptr || ctx->strategy().shard() < ShardingMode::gradients) return nullptr;
  return [ctx, vars](size_t index, Tensor gradient) { return reduce_scatter_gradient(*ctx, gradient, vars.at(index)->name()); };
}

bool defers_kernel_gradients() {
  const ReplicaContext* ctx = current_replica_context();
  if (ctx == nullptr || ctx->strategy().shard() >= ShardingMode::gradients) return false;
  const ReplicatedStrategy& s = ctx->strategy();
  if (s.local_replicas() < 2 || s.local_replicas() != s.num_replicas()) return false;
  const char* env = std::getenv("KEEL_DEFERRED_KERNEL_GRADIENTS");
  return env == nullptr || std::string(env) != "0";
}

bool Optimizer::reduce(std::vector<Tensor>& grads, const std::vector<Variable*>& vars, GradientForm form,
                       std::optional<size_t>& non_finite, std::vector<const float*>& means) const {
  ReplicaContext* ctx = current_replica_context();
  if (form == GradientForm::reduced_shards) return true;
  if (ctx == nullptr) return false;
  if (ctx->strategy().shard() >= ShardingMode::gradients) {
    for (size_t i = 0; i < grads.size(); ++i) {
      if (grads[i].defined()) grads[i] = reduce_scatter_gradient(*ctx, grads[i], vars[i]->name());
    }
    return true;
  }
  if (ctx->num_replicas() == 1) return false;
  std::vector<Tensor> defined;
  std::vector<size_t> variable;  // of each defined gradient
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined() || laid_out(vars[i], ctx)) continue;  // laid out: each core's block is reduced
    defined.push_back(grads[i]);
    variable.push_back(i);
  }
  // Each replica reads the mean only where it updates (apply_gradients: its shard of the process's
  // variables, or of the slice's with sharded slots), in place where processes share it.
  std::vector<const float*> located(defined.size());
  const size_t first = ctx->all_reduce_for_update(ReduceOp::Mean, defined, ctx->strategy().updates_slice_shards(), located);
  non_finite = first < variable.size() ? variable[first] : vars.size();
  for (size_t j = 0; j < variable.size(); ++j) means[variable[j]] = located[j];
  if (ctx->leads_process()) plan_gradient_placement(*ctx, vars, variable);
  return false;
}

void Optimizer::plan_gradient_placement(const ReplicaContext& ctx, const std::vector<Variable*>& vars,
                                        const std::vector<size_t>& variable) const {
  const Collectives::GradientArenaPlan plan = ctx.gradient_arena_plan();
  if (plan.memory.empty() || plan.memory.size() != variable.size()) {
    placement_.reset();
    return;
  }
  auto placement = std::make_shared<GradientPlacement>();
  for (size_t j = 0; j < variable.size(); ++j) {
    const Tensor& value = vars[variable[j]]->value();
    if (value.defined() && !value.is_abstract() && value.size() == plan.sizes[j]) {
      placement->slots[value.storage().id()] = {plan.memory[j], plan.sizes[j]};
    }
  }
  placement_ = std::move(placement);
}

// The spans cut into pieces of kUpdatePiece elements, updated on the replica's share of the threads:
// an element's update does not depend on the span it is in, so neither do the bits.
// A helper takes part from kMinUpdateElementsPerThread elements: an update reads and writes several
// floats per element (Adam's with a square root and a division), worth a thread on fewer elements
// than a copy (the seed MLP's 101,770 parameters: on 2 threads; measured with Adam, SGD shares it).
void Optimizer::update_in_pieces(const std::vector<UpdateSpan>& spans, int64_t step, bool taken) {
  constexpr int64_t kUpdatePiece = int64_t{1} << 14;
  constexpr double kMinUpdateElementsPerThread = 1 << 15;
  std::vector<UpdateSpan> pieces;
  int64_t elements = 0;
  for (const UpdateSpan& span : spans) {
    elements += span.size;
    for (int64_t at = 0; at < span.size; at += kUpdatePiece) {
      UpdateSpan piece = span;
      piece.size = std::min(kUpdatePiece, span.size - at);
      piece.variable += at;
      piece.gradient += at;
      for (float*& slot : piece.slots) {
        if (slot != nullptr) slot += at;
      }
      pieces.push_back(piece);
    }
  }
  const int threads = threads_worth(static_cast<double>(elements), kMinUpdateElementsPerThread);
  if (!taken) {
    parallel_for(static_cast<int64_t>(pieces.size()), [&](int64_t p) { update(pieces[static_cast<size_t>(p)], step); }, threads);
    return;
  }
  parallel_for(
      threads,
      [&](int64_t) {
        for (size_t p = next_piece_.fetch_add(1, std::memory_order_relaxed); p < pieces.size();
             p = next_piece_.fetch_add(1, std::memory_order_relaxed)) {
          update(pieces[p], step);
        }
      },
      threads);
}

bool Optimizer::means_are_shared(const std::vector<Tensor>& grads, const std::vector<Variable*>& vars,
                                 const std::vector<const float*>& means, const ReplicaContext* ctx) {
  for (size_t i = 0; i < vars.size(); ++i) {
    if (!grads[i].defined() || grads[i].is_abstract()) continue;
    if (laid_out(vars[i], ctx) || means[i] == nullptr) return false;
  }
  return true;
}

UpdateSpan Optimizer::span_of(Variable* var, const float* gradient, bool grad_is_shard, int replica, int replicas) const {
  const ShardRange range = shard_range(var->value().size(), replicas, replica);
  UpdateSpan span;
  span.size = range.size();
  span.variable = var->mutable_value().data() + range.begin;
  span.gradient = gradient + (grad_is_shard ? 0 : range.begin);
  const std::vector<Variable*>& slots = slots_.at(var->name());
  for (size_t k = 0; k < slots.size(); ++k) span.slots[k] = slots[k]->mutable_value().data() + range.begin;
  return span;
}

size_t Optimizer::first_non_finite(const std::vector<Tensor>& grads, const std::vector<Variable*>& vars,
                                   bool grads_are_shards, int replica, int replicas) {
  // This replica's range of every gradient in pieces, checked on the replica's share of the threads
  // (a ResNet50's 23.5M elements are a few milliseconds on one).
  constexpr int64_t kPiece = int64_t{1} << 16;
  struct Piece {
    size_t variable;
    const float* values;
    int64_t size;
  };
  std::vector<Piece> pieces;
  int64_t elements = 0;
  for (size_t i = 0; i < vars.size(); ++i) {
    if (!grads[i].defined() || grads[i].is_abstract() || laid_out(vars[i], current_replica_context())) continue;
    const ShardRange range = shard_range(vars[i]->value().size(), replicas, replica);
    const float* values = grads[i].data() + (grads_are_shards ? 0 : range.begin);
    for (int64_t at = 0; at < range.size(); at += kPiece) pieces.push_back({i, values + at, std::min(kPiece, range.size() - at)});
    elements += range.size();
  }
  std::vector<char> finite(pieces.size(), 1);
  parallel_for(
      static_cast<int64_t>(pieces.size()),
      [&](int64_t p) {
        const Piece& piece = pieces[static_cast<size_t>(p)];
        finite[static_cast<size_t>(p)] = all_finite(piece.values, piece.size) ? 1 : 0;
      },
      threads_worth(static_cast<double>(elements), kMinElementsPerThread));
  size_t mine = vars.size();
  for (size_t p = 0; p < pieces.size() && mine == vars.size(); ++p) {
    if (!finite[p]) mine = pieces[p].variable;  // pieces go in variable order: the first is the smallest
  }
  if (replicas == 1) return mine;
  return static_cast<size_t>(current_replica_context()->all_reduce_min(static_cast<int64_t>(mine)));
}

void Optimizer::check(const std::vector<Tensor>& grads, const std::vector<Variable*>& vars, GradientForm form,
                      int replica, int replicas) const {
  for (size_t i = 0; i < vars.size(); ++i) {
    if (!grads[i].defined()) continue;
    const Shape expected = laid_out(vars[i], current_replica_context()) ? block_shape(*vars[i], replicas, replica)
                           : form == GradientForm::local
                               ? vars[i]->shape()
                               : Shape{shard_range(num_elements(vars[i]->shape()), replicas, replica).size()};
    if (grads[i].shape() != expected) {
      throw std::invalid_argument("apply_gradients: gradient " + shape_string(grads[i].shape()) + " for variable '" +
                                  vars[i]->name() + "' " + shape_string(vars[i]->shape()) +
                                  (form == GradientForm::local ? "" : " (its shard: " + shape_string(expected) + ")"));
    }
    if (!slots_.count(vars[i]->name())) {
      throw std::invalid_argument("apply_gradients: variable '" + vars[i]->name() + "' was not in the first step's list");
    }
  }
}

void Optimizer::build(const std::vector<Variable*>& vars) {
  if (built()) return;
  // Keras's creation order: every variable's first slot, then every variable's second slot.
  for (Variable* v : vars) slots_[v->name()];  // every variable is known, even with no slots (plain SGD)
  // Mirrored slots, or each core charged its shard only when the strategy shards optimizer state.
  for (const std::string& slot : slot_names()) {
    for (Variable* v : vars) {
      std::optional<ContextScope> sharded;  // a LayoutMap's variable: each core its block of the slot
      enter_sharded_scope_if(sharded, ShardingMode::optimizer, Category::optimizer);
      enter_laid_out_scope_if(sharded, v->sharded_axis(), Category::optimizer);
      const std::string name = name_ + "/" + v->name() + "/" + slot;
      Tensor value = Tensor::zeros(v->shape(), Category::optimizer, name);
      slot_order_.push_back(std::make_unique<Variable>(name, std::move(value), false));
      slots_[v->name()].push_back(slot_order_.back().get());
    }
  }
  built_ = true;
}

std::vector<Variable*> Optimizer::slot_variables() const {
  std::vector<Variable*> out;
  for (const auto& v : slot_order_) out.push_back(v.get());
  return out;
}

nlohmann::json Optimizer::get_config() const {
  return {{"name", name_},
          {"learning_rate", schedule_ ? schedule_->get_config() : nlohmann::json(learning_rate_)},
          {"weight_decay", weight_decay_ > 0.0f ? nlohmann::json(weight_decay_) : nlohmann::json(nullptr)}};
}

nlohmann::json Adam::get_config() const {
  nlohmann::json c = Optimizer::get_config();
  c["beta_1"] = options_.beta_1;
  c["beta_2"] = options_.beta_2;
  c["epsilon"] = options_.epsilon;
  c["amsgrad"] = false;
  return c;
}

SGD::SGD(Options options) : Optimizer("SGD", options.learning_rate, options.weight_decay), options_(options) {
  if (!(options_.momentum >= 0.0f && options_.momentum <= 1.0f)) {
    throw std::invalid_argument("SGD momentum must be in [0, 1], got " + std::to_string(options_.momentum));
  }
}

std::vector<std::string> SGD::slot_names() const {
  if (options_.momentum != 0.0f) return {"momentum"};
  return {};
}

nlohmann::json SGD::get_config() const {
  nlohmann::json c = Optimizer::get_config();
  c["momentum"] = options_.momentum;
  c["nesterov"] = options_.nesterov;
  return c;
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, float learning_rate, float momentum, bool nesterov,
                                          float weight_decay) {
  if (std::isnan(learning_rate) || std::isinf(learning_rate) || learning_rate == 0.0f) {
    throw std::invalid_argument("the learning rate must be finite and positive, got " + std::to_string(learning_rate));
  }
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "adam") {
    Adam::Options o;
    if (learning_rate > 0) o.learning_rate = learning_rate;
    o.weight_decay = weight_decay;
    return std::make_unique<Adam>(o);
  }
  if (lower == "sgd") {
    SGD::Options o;
    if (learning_rate > 0) o.learning_rate = learning_rate;
    o.momentum = momentum;
    o.nesterov = nesterov;
    o.weight_decay = weight_decay;
    return std::make_unique<SGD>(o);
  }
  throw std::invalid_argument("unknown optimizer '" + quote_untrusted(name) + "' (known: adam, sgd)");
}

}  // namespace keel
