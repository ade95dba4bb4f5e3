#include "framework/train/optimizers.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <stdexcept>

#include "framework/core/limits.h"
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

Optimizer::Optimizer(std::string name, float learning_rate) : name_(std::move(name)), learning_rate_(learning_rate) {
  if (!(std::isfinite(learning_rate) && learning_rate > 0.0f)) {
    throw std::invalid_argument("the learning rate must be finite and positive, got " + std::to_string(learning_rate));
  }
}

GradientUpdate Optimizer::apply_gradients(std::vector<Tensor> grads, const std::vector<Variable*>& vars,
                                          GradientForm form) {
  if (grads.size() != vars.size()) {
    throw std::invalid_argument("apply_gradients: " + std::to_string(grads.size()) + " gradients for " +
                                std::to_string(vars.size()) + " variables");
  }
  ReplicaContext* ctx = current_replica_context();
  const int replica = ctx != nullptr ? ctx->replica_id() : 0;
  const int replicas = ctx != nullptr ? ctx->num_replicas() : 1;
  const ShardingMode shard = ctx != nullptr ? ctx->strategy().shard() : ShardingMode::none;
  // Slots (and the replicas' votes) are created once, mirrored or sharded, by one replica
  // (TensorFlow's merge_call); every replica reads the same sizes, since only a merge_call changes them.
  if (!built() || non_finite_votes_.size() < static_cast<size_t>(replicas)) {
    auto create = [&] {
      build(vars);
      non_finite_votes_.resize(std::max(non_finite_votes_.size(), static_cast<size_t>(replicas)));
    };
    if (ctx != nullptr) {
      ctx->merge_call(create);
    } else {
      create();
    }
  }
  check(grads, vars, form, replica, replicas);
  // Every replica reads the step before the reduction's first barrier; replica 0 advances it before
  // the last barrier below, so a following apply_gradients in the same run reads the new value.
  const int64_t step = iterations_ + 1;
  const bool shards = reduce(grads, vars, form);
  if (const size_t bad = first_non_finite(grads, vars, shards, replica, replicas); bad < vars.size()) {
    if (replicas > 1) ctx->barrier();  // every replica has read the votes before any votes again
    return GradientUpdate{false, vars[bad]->name()};
  }
  // Each replica updates its shard of every variable; with sharded slots that is all it holds of them.
  std::vector<Tensor> updated(vars.size());
  for (size_t i = 0; i < vars.size(); ++i) {
    if (!grads[i].defined()) continue;
    updated[i] = vars[i]->value();
    if (!updated[i].is_abstract()) update(span_of(vars[i], grads[i], shards, replica, replicas), step);
  }
  if (replica == 0) iterations_ = step;
  if (replicas == 1) return GradientUpdate{};
  if (shard == ShardingMode::optimizer || shard == ShardingMode::gradients) {
    ctx->all_gather_shards(updated);  // every core's parameters get every shard (ends with a barrier)
  } else {
    // none: every core updates its whole copy; full: parameters stay sharded until a layer gathers
    // them. Either way every shard is written before any replica reads one.
    ctx->barrier();
  }
  return GradientUpdate{};
}

namespace {

// No NaN and no infinity: x * 0 is (+-)0 for a finite x and NaN otherwise, so the sum is NaN exactly
// when some element is not finite; Eigen sums in SIMD packets, with no branch per element.
bool all_finite(const float* values, int64_t count) {
  return std::isfinite((Eigen::Map<const Eigen::ArrayXf>(values, static_cast<Eigen::Index>(count)) * 0.0f).sum());
}

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

bool Optimizer::reduce(std::vector<Tensor>& grads, const std::vector<Variable*>& vars, GradientForm form) const {
  if (form == GradientForm::reduced_shards) return true;
  ReplicaContext* ctx = current_replica_context();
  if (ctx == nullptr) return false;
  if (ctx->strategy().shard() >= ShardingMode::gradients) {
    for (size_t i = 0; i < grads.size(); ++i) {
      if (grads[i].defined()) grads[i] = reduce_scatter_gradient(*ctx, grads[i], vars[i]->name());
    }
    return true;
  }
  if (ctx->num_replicas() == 1) return false;
  std::vector<Tensor> defined;
  for (const Tensor& g : grads) {
    if (g.defined()) defined.push_back(g);
  }
  ctx->all_reduce(ReduceOp::Mean, defined);
  return false;
}

UpdateSpan Optimizer::span_of(Variable* var, const Tensor& grad, bool grad_is_shard, int replica, int replicas) const {
  const ShardRange range = shard_range(var->value().size(), replicas, replica);
  UpdateSpan span;
  span.size = range.size();
  span.variable = var->mutable_value().data() + range.begin;
  span.gradient = grad.data() + (grad_is_shard ? 0 : range.begin);
  const std::vector<Variable*>& slots = slots_.at(var->name());
  for (size_t k = 0; k < slots.size(); ++k) span.slots[k] = slots[k]->mutable_value().data() + range.begin;
  return span;
}

size_t Optimizer::first_non_finite(const std::vector<Tensor>& grads, const std::vector<Variable*>& vars,
                                   bool grads_are_shards, int replica, int replicas) {
  size_t mine = vars.size();
  for (size_t i = 0; i < vars.size() && mine == vars.size(); ++i) {
    if (!grads[i].defined() || grads[i].is_abstract()) continue;
    const ShardRange range = shard_range(vars[i]->value().size(), replicas, replica);
    if (!all_finite(grads[i].data() + (grads_are_shards ? 0 : range.begin), range.size())) mine = i;
  }
  if (replicas == 1) return mine;
  non_finite_votes_[static_cast<size_t>(replica)] = mine;
  current_replica_context()->barrier();  // every vote is in
  return *std::min_element(non_finite_votes_.begin(), non_finite_votes_.begin() + replicas);
}

void Optimizer::check(const std::vector<Tensor>& grads, const std::vector<Variable*>& vars, GradientForm form,
                      int replica, int replicas) const {
  for (size_t i = 0; i < vars.size(); ++i) {
    if (!grads[i].defined()) continue;
    const Shape expected = form == GradientForm::local
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
  std::optional<ContextScope> sharded;
  enter_sharded_scope_if(sharded, ShardingMode::optimizer, Category::optimizer);
  for (const std::string& slot : slot_names()) {
    for (Variable* v : vars) {
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
  return {{"name", name_}, {"learning_rate", schedule_ ? schedule_->get_config() : nlohmann::json(learning_rate_)}};
}

void Adam::update(const UpdateSpan& span, int64_t step) {
  const double b1 = options_.beta_1, b2 = options_.beta_2;
  const float alpha = static_cast<float>(learning_rate_at(step - 1) * std::sqrt(1.0 - std::pow(b2, static_cast<double>(step))) /
                                         (1.0 - std::pow(b1, static_cast<double>(step))));
  const float one_minus_b1 = 1.0f - options_.beta_1, one_minus_b2 = 1.0f - options_.beta_2;
  const float epsilon = options_.epsilon;
  float* w = span.variable;
  const float* g = span.gradient;
  float* m = span.slots[0];
  float* v = span.slots[1];
  // Keras: m += (g - m)(1 - b1); v += (g² - v)(1 - b2); w -= alpha m / (sqrt(v) + eps). One block of
  // 2,048 elements at a time (4 arrays × 8 KiB: in L1 between the three statements), so the update is
  // one pass over memory instead of three; each element's operations are the same, so are its bits.
  constexpr int64_t kBlock = 2048;
  const int64_t n = span.size;
  for (int64_t i = 0; i < n; i += kBlock) {
    const Eigen::Index len = static_cast<Eigen::Index>(std::min(kBlock, n - i));
    Eigen::Map<Eigen::ArrayXf> wb(w + i, len), mb(m + i, len), vb(v + i, len);
    const Eigen::Map<const Eigen::ArrayXf> gb(g + i, len);
    mb += (gb - mb) * one_minus_b1;
    vb += (gb.square() - vb) * one_minus_b2;
    wb -= alpha * mb / (vb.sqrt() + epsilon);
  }
}

nlohmann::json Adam::get_config() const {
  nlohmann::json c = Optimizer::get_config();
  c["beta_1"] = options_.beta_1;
  c["beta_2"] = options_.beta_2;
  c["epsilon"] = options_.epsilon;
  c["amsgrad"] = false;
  return c;
}

SGD::SGD(Options options) : Optimizer("SGD", options.learning_rate), options_(options) {
  if (!(options_.momentum >= 0.0f && options_.momentum <= 1.0f)) {
    throw std::invalid_argument("SGD momentum must be in [0, 1], got " + std::to_string(options_.momentum));
  }
}

std::vector<std::string> SGD::slot_names() const {
  if (options_.momentum != 0.0f) return {"momentum"};
  return {};
}

void SGD::update(const UpdateSpan& span, int64_t step) {
  const Eigen::Index n = static_cast<Eigen::Index>(span.size);
  Eigen::Map<Eigen::ArrayXf> w(span.variable, n);
  const Eigen::Map<const Eigen::ArrayXf> g(span.gradient, n);
  const float lr = learning_rate_at(step - 1);
  if (options_.momentum == 0.0f) {
    w -= lr * g;
    return;
  }
  Eigen::Map<Eigen::ArrayXf> velocity(span.slots[0], n);
  velocity = options_.momentum * velocity - lr * g;
  if (options_.nesterov) {
    w += options_.momentum * velocity - lr * g;
  } else {
    w += velocity;
  }
}

nlohmann::json SGD::get_config() const {
  nlohmann::json c = Optimizer::get_config();
  c["momentum"] = options_.momentum;
  c["nesterov"] = options_.nesterov;
  return c;
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, float learning_rate, float momentum, bool nesterov) {
  if (std::isnan(learning_rate) || std::isinf(learning_rate) || learning_rate == 0.0f) {
    throw std::invalid_argument("the learning rate must be finite and positive, got " + std::to_string(learning_rate));
  }
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "adam") {
    Adam::Options o;
    if (learning_rate > 0) o.learning_rate = learning_rate;
    return std::make_unique<Adam>(o);
  }
  if (lower == "sgd") {
    SGD::Options o;
    if (learning_rate > 0) o.learning_rate = learning_rate;
    o.momentum = momentum;
    o.nesterov = nesterov;
    return std::make_unique<SGD>(o);
  }
  throw std::invalid_argument("unknown optimizer '" + quote_untrusted(name) + "' (known: adam, sgd)");
}

}  // namespace keel
