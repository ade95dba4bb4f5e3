// Keras optimizers: Adam and SGD, with Keras's defaults, update rules and slot names.
//
// apply_gradients inside strategy.run all-reduces (mean) the gradients across replicas through the
// replica context's collectives, then applies the update once to the mirrored variables, each
// replica updating a share of them. Slots are created mirrored on first use (merge_call), charged as
// `optimizer`, named "<Optimizer>/<variable>/<slot>". State is keyed by variable name, and
// `iterations` advances once per step.
//
// Sharding (ReplicatedStrategy::Options::shard, framework/device/sharding.h): every replica updates
// its shard_range of every variable's elements, whatever the mode. With `optimizer` or more, slots
// are charged to each core for its shard only, and (`optimizer`, `gradients`) the updated shards are
// all-gathered into every core's parameters — with `full` they stay sharded until a layer gathers
// them; with `gradients` or `full`, each gradient is reduce-scattered instead of all-reduced.
// The arithmetic of each element is the same in every mode, so are its bits.
//
// An update whose all-reduced gradients hold a NaN or an infinity is skipped whole, on every replica,
// and `iterations` does not advance (as TensorFlow's LossScaleOptimizer and PyTorch's GradScaler skip
// a step; Keras would apply it): the variables and slots keep the last finite step's values.
#pragma once

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/autodiff/tape.h"
#include "framework/autodiff/variable.h"
#include "framework/device/gradient_placement.h"

namespace keel {

class ReplicaContext;
class ReplicatedStrategy;

// keras.optimizers.schedules: the learning rate as a function of the optimizer's iterations (the
// number of updates already applied), so a resumed run continues on exactly the same schedule.
class LearningRateSchedule {
 public:
  virtual ~LearningRateSchedule() = default;
  virtual float operator()(int64_t step) const = 0;
  virtual nlohmann::json get_config() const = 0;
};

// CosineDecay(initial_learning_rate, decay_steps, alpha): initial * ((1 - alpha) * 0.5 * (1 +
// cos(pi * min(step, decay_steps) / decay_steps)) + alpha).
class CosineDecay : public LearningRateSchedule {
 public:
  CosineDecay(float initial_learning_rate, int64_t decay_steps, float alpha = 0.0f);
  float operator()(int64_t step) const override;
  nlohmann::json get_config() const override;

 private:
  float initial_;
  int64_t decay_steps_;
  float alpha_;
};

// What the gradients handed to apply_gradients are: each replica's own (to be reduced across
// replicas), or this replica's shard of the mean already (reduce_scatter_as_ready's results).
enum class GradientForm { local, reduced_shards };

// With a strategy that shards gradients, inside strategy.run: the hook for GradientTape::gradient
// that reduce-scatters (mean) each variable's gradient as soon as backward has finished it and keeps
// this replica's shard (charged as `gradients`), so no core ever holds every full gradient (ZeRO-2).
// Its results go to apply_gradients with GradientForm::reduced_shards. nullptr otherwise.
GradientReadyFn reduce_scatter_as_ready(const std::vector<Variable*>& vars);

// Inside strategy.run: whether the replicas may leave their dense kernels' gradients to
// apply_gradients' all-reduce (ReplicaContext::allow_deferred_products), which computes them tile by
// tile while it sums them: with several replicas in this process and none elsewhere, gradients
// reduced by all_reduce_for_update (neither they nor the parameters sharded), unless
// KEEL_DEFERRED_KERNEL_GRADIENTS=0. The caller allows them only where no hook reads the gradients.
bool defers_kernel_gradients();

// Variables a LayoutMap splits along an axis (framework/device/layout.h): backward leaves each one's
// gradient as the stack of every replica's gradient of this core's block (ops::column_parallel_matmul);
// apply_gradients reduces a stack to the block of the mean (the collectives' tree order, so the bits
// of an all-reduce) and updates that block only. Inside strategy.run, this hook for
// GradientTape::gradient reduces each stack as soon as backward has finished it, so it lives briefly,
// and hands the other gradients to `next` (kept as they are if null). `next` when nothing is laid out.
GradientReadyFn reduce_laid_out_as_ready(const std::vector<Variable*>& vars, GradientReadyFn next);

// One replica's gradients checked for a NaN or an infinity as backward finishes each, while it is
// still in the caches, instead of in a pass over all of them before the update (which read them from
// memory again): hook() for GradientTape::gradient, then apply_gradients(..., &check). Only where
// one replica computes the step (elsewhere the all-reduce checks as it sums); `vars` as the tape and
// apply_gradients get them.
class GradientCheck {
 public:
  explicit GradientCheck(size_t variables) : first_(variables), variables_(variables) {}
  // Checks each gradient handed over (skipping abstract ones), then hands it to `next` (as it is if null).
  GradientReadyFn hook(GradientReadyFn next);
  // The first variable whose gradient was not finite, in the order of `vars`; their count if none.
  size_t first_non_finite() const { return first_; }
  size_t variables() const { return variables_; }

 private:
  size_t first_;
  size_t variables_;
};

// One contiguous piece of a variable to update, with the gradient's and each slot's matching
// elements (slot_names() order): `size` floats each.
struct UpdateSpan {
  static constexpr size_t kMaxSlots = 2;
  float* variable = nullptr;
  const float* gradient = nullptr;
  std::array<float*, kMaxSlots> slots{};
  int64_t size = 0;
};

// What apply_gradients did with one step's gradients.
struct GradientUpdate {
  bool applied = true;
  // Skipped: the first variable, in the order of `vars`, whose all-reduced gradient was not finite.
  std::string non_finite_variable;
};

class Optimizer {
 public:
  // The learning rate must be finite and positive, the weight decay finite and non-negative
  // (std::invalid_argument otherwise).
  Optimizer(std::string name, float learning_rate, float weight_decay = 0.0f);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  const std::string& name() const { return name_; }  // "Adam"
  float learning_rate() const { return learning_rate_; }
  void set_learning_rate(float lr) { learning_rate_ = lr; }
  // With a schedule, the rate of an update is schedule(iterations before it), as in Keras.
  void set_schedule(std::shared_ptr<LearningRateSchedule> schedule) { schedule_ = std::move(schedule); }
  bool has_schedule() const { return schedule_ != nullptr; }
  float learning_rate_at(int64_t iterations) const { return schedule_ ? (*schedule_)(iterations) : learning_rate_; }
  // Keras 3's `weight_decay` (decoupled, as AdamW's): before each update, every variable that has a
  // gradient becomes w - w * weight_decay * lr, with the update's learning rate. 0: none (Keras's None).
  float weight_decay() const { return weight_decay_; }
  int64_t iterations() const { return iterations_; }
  void set_iterations(int64_t n) { iterations_ = n; }

  // Undefined gradients (variables the loss does not depend on) are skipped; every replica must
  // leave the same ones undefined. Inside strategy.run, called by every replica: the gradients are
  // all-reduced (mean) in place, each replica's result only where it updates (its shard: the rest of
  // its `grads` is left unspecified, so read a gradient before applying it). Outside a run
  // (one replica, TensorFlow's default strategy) they are applied as they are. A step with a
  // non-finite gradient is skipped whole (see the top of this file); every replica returns the same.
  // `checked`: the gradients' GradientCheck, where one replica computes the step (else ignored).
  GradientUpdate apply_gradients(std::vector<Tensor> grads, const std::vector<Variable*>& vars,
                                 GradientForm form = GradientForm::local, const GradientCheck* checked = nullptr);
  // The update of a host program (framework/device/replica_rows.h: one program for every replica of
  // a process, Model::train_step_on_cores), called in it: `means` are the replicas' mean gradients
  // already, which ops computed as apply_gradients' all-reduce would. Applied as apply_gradients
  // inside a run applies them, to the same bits: the slots created mirrored the first time, the
  // all-reduce's buffers and traffic recorded on every core (ReplicatedStrategy::
  // record_host_all_reduce), the whole step skipped where a mean is not finite (`checked`: the means'
  // GradientCheck, if backward checked them).
  GradientUpdate apply_replica_means(const std::vector<Tensor>& means, const std::vector<Variable*>& vars,
                                     ReplicatedStrategy& strategy, const GradientCheck* checked = nullptr);
  // Creates the slots for `vars` now (before restoring a checkpoint); no-op if already built.
  void build(const std::vector<Variable*>& vars);
  bool built() const { return built_; }

  // Keras's order: slots in creation order (for Adam, every m, then every v).
  std::vector<Variable*> slot_variables() const;
  // Where the next backward of the replica leading this process writes its variables' gradients
  // so that the next apply_gradients' all-reduce reads them in place (GradientPlacement, from the
  // plan the last one left: under mpirun on one machine, the process's gradient arena); null where
  // there is none. The training step installs it for that replica (GradientPlacementScope).
  std::shared_ptr<const GradientPlacement> gradient_placement() const { return placement_; }
  virtual nlohmann::json get_config() const;

 protected:
  virtual std::vector<std::string> slot_names() const = 0;
  // Applies one update to a span of elements; `step` is the 1-based iteration. Elementwise: any
  // split of a variable into spans gives the same bits.
  virtual void update(const UpdateSpan& span, int64_t step) = 0;

 private:
  void check(const std::vector<Tensor>& grads, const std::vector<Variable*>& vars, GradientForm form, int replica,
             int replicas) const;
  // Reduces local gradients across replicas: all-reduced in place, or replaced by this replica's
  // reduced shard when the strategy shards gradients. Returns whether they are shards now. An
  // all-reduce also votes on the first variable whose gradient is not finite (`non_finite`), and
  // says where each mean is (`means`, one per variable: null where it is in grads[i] or none).
  bool reduce(std::vector<Tensor>& grads, const std::vector<Variable*>& vars, GradientForm form,
              std::optional<size_t>& non_finite, std::vector<const float*>& means) const;
  // gradient_placement() for the next step, from the plan ctx's all-reduce left for `vars`'
  // gradients that it reduced (`variable`: the index in vars of each, in the order it had them).
  void plan_gradient_placement(const ReplicaContext& ctx, const std::vector<Variable*>& vars,
                               const std::vector<size_t>& variable) const;
  // build(vars) the first time, by one replica (merge_call) where there are several.
  void build_once(const std::vector<Variable*>& vars, ReplicaContext* ctx);
  // After a replica's part of an update (several replicas): every replica's copy of the parameters
  // gets the parts the others updated, or a barrier where they share one copy.
  static void share_update(ReplicaContext& ctx, std::vector<Tensor>& updated);
  // update() over the spans, in fixed pieces on the replica's share of the threads. `taken`: the
  // spans are every replica's of this process (the same on each), and each piece goes to whichever
  // replica's thread takes it first (next_piece_): a slot that is behind updates less.
  void update_in_pieces(const std::vector<UpdateSpan>& spans, int64_t step, bool taken = false);
  // Whether every concrete gradient's mean is the in-process sum all the process's replicas read
  // (means[i] set by the reduction, no laid-out variable): the same answer on every replica.
  static bool means_are_shared(const std::vector<Tensor>& grads, const std::vector<Variable*>& vars,
                               const std::vector<const float*>& means, const ReplicaContext* ctx);
  // This replica's span of variable i (its shard_range), with `gradient` whole or already its shard.
  UpdateSpan span_of(Variable* var, const float* gradient, bool grad_is_shard, int replica, int replicas) const;
  // A laid-out variable's block on `replica`, one span per run of consecutive elements, with `grad`
  // that block.
  void append_block_spans(Variable* var, const Tensor& grad, int replica, int replicas, std::vector<UpdateSpan>& spans) const;
  // The first laid-out variable whose block of the mean holds a NaN or an infinity on any replica
  // (vars.size() if none), the same on every replica.
  static size_t first_non_finite_block(const std::vector<Tensor>& grads, const std::vector<Variable*>& vars, int replicas);
  // The index of the first variable with a non-finite gradient, vars.size() if none: each replica
  // checks its shard of every gradient and the replicas agree on the smallest (all_reduce_min).
  size_t first_non_finite(const std::vector<Tensor>& grads, const std::vector<Variable*>& vars, bool grads_are_shards,
                          int replica, int replicas);

  std::string name_;
  float learning_rate_;
  float weight_decay_;
  std::shared_ptr<LearningRateSchedule> schedule_;
  int64_t iterations_ = 0;
  bool built_ = false;
  std::map<std::string, std::vector<Variable*>> slots_;  // by variable name
  std::vector<std::unique_ptr<Variable>> slot_order_;
  // Written by the replica that leads this process in its reduce, read by it in the next step.
  mutable std::shared_ptr<const GradientPlacement> placement_;
  // The next piece of an update the process's replicas share (update_in_pieces, `taken`): reset by
  // the leading replica before the reduction, taken by all after it.
  std::atomic<size_t> next_piece_{0};
};

class Adam : public Optimizer {
 public:
  struct Options {
    float learning_rate = 0.001f;
    float beta_1 = 0.9f;
    float beta_2 = 0.999f;
    float epsilon = 1e-7f;
    float weight_decay = 0.0f;  // Keras 3's weight_decay (Optimizer::weight_decay); 0 is None
  };
  Adam() : Adam(Options{}) {}
  explicit Adam(Options options) : Optimizer("Adam", options.learning_rate, options.weight_decay), options_(options) {}
  nlohmann::json get_config() const override;

 protected:
  std::vector<std::string> slot_names() const override { return {"m", "v"}; }
  void update(const UpdateSpan& span, int64_t step) override;

 private:
  Options options_;
};

class SGD : public Optimizer {
 public:
  struct Options {
    float learning_rate = 0.01f;
    float momentum = 0.0f;
    bool nesterov = false;
    float weight_decay = 0.0f;  // as Adam's
  };
  SGD() : SGD(Options{}) {}
  // momentum finite in [0, 1].
  explicit SGD(Options options);
  nlohmann::json get_config() const override;

 protected:
  std::vector<std::string> slot_names() const override;
  void update(const UpdateSpan& span, int64_t step) override;

 private:
  Options options_;
};

// "adam" | "sgd" with a learning rate (negative: the optimizer's default; otherwise finite and
// positive). std::invalid_argument for an unknown name or a value out of range.
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, float learning_rate = -1.0f,
                                          float momentum = 0.0f, bool nesterov = false, float weight_decay = 0.0f);

}  // namespace keel
