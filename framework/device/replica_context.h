// ReplicaContext: what a replica knows about itself inside strategy.run (TensorFlow's
// ReplicaContext) — its id, the number of replicas, the global step it is running — and the one way
// it talks to the others: the collectives. It owns the step: random ops key their streams by
// (seed, step, replica, op) through random_key(), and state that replicas update on their own during
// the step (ReplicaLocalState) is combined when the step ends.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <span>
#include <vector>

#include "framework/core/tensor.h"
#include "framework/device/collectives.h"
#include "framework/device/deferred_product.h"

namespace keel {

class ReplicatedStrategy;
class ReplicaContext;

// State that each replica updates on its own during a step and that is combined across replicas
// when the step ends: Keras's variables with synchronization=ON_READ and aggregation=MEAN
// (BatchNormalization's moving statistics). A replica that updated it calls
// ReplicaContext::mark_for_sync; at the end of that strategy.run every replica asks every state
// marked by any replica, in creation order, for its contributions, the strategy averages all of
// them in one all-reduce (the collectives' tree order: each element's mean is what an all-reduce of
// that tensor alone gives), and hands each state its means. One meeting for the step, not one per
// state: ResNet18's 20 BatchNormalization layers met 40 times, across processes too.
class ReplicaLocalState {
 public:
  ReplicaLocalState();
  ReplicaLocalState(const ReplicaLocalState& other);
  ReplicaLocalState& operator=(const ReplicaLocalState&) = default;  // keeps its own creation order
  virtual ~ReplicaLocalState();
  // How many exist in this process. A strategy.run that starts while none exists skips the meeting at
  // its end where replicas hand in their marks (nothing can be marked): the seed MLP's step on v3-8
  // then has one barrier fewer. One created inside such a run cannot be marked in it
  // (ReplicaContext::mark_for_sync throws): create them before running, as a model's layers are.
  static int64_t live();
  // This replica's contributions of this step: tensors charged to its core, as many and of the same
  // shapes on every replica.
  virtual std::vector<Tensor> replica_contributions(ReplicaContext& ctx) = 0;
  // Their means over the replicas (the tensors replica_contributions returned, averaged in place),
  // for the variables every replica reads.
  virtual void take_means(ReplicaContext& ctx, std::span<Tensor> means) = 0;
  uint64_t creation_order() const { return creation_order_; }

 private:
  uint64_t creation_order_;
};

class ReplicaContext {
 public:
  // `collectives` is null where replicas may not wait for each other (for_each_replica).
  ReplicaContext(ReplicatedStrategy& strategy, Collectives* collectives, int replica_id, int num_replicas, int64_t step);
  ReplicaContext(const ReplicaContext&) = delete;
  ReplicaContext& operator=(const ReplicaContext&) = delete;

  ReplicatedStrategy& strategy() const { return strategy_; }
  int replica_id() const { return replica_id_; }
  int num_replicas() const { return num_replicas_; }
  // The global step this run executes (ReplicatedStrategy::step()).
  int64_t step() const { return step_; }

  // The key of a random op's stream in this step and replica: a function of (op_key, step,
  // replica) only, so a custom loop and fit draw the same numbers, and every step new ones.
  uint64_t random_key(uint64_t op_key) const;

  // False where replicas may not wait for each other (for_each_replica): no collective may be called.
  bool has_collectives() const { return collectives_ != nullptr; }
  // The collectives (framework/device/collectives.h), called by every replica of the run.
  void all_reduce(ReduceOp op, std::span<Tensor> values) const { collectives().all_reduce(replica_id_, op, values); }
  size_t all_reduce_for_update(ReduceOp op, std::span<Tensor> values, bool slice_shards,
                               std::span<const float*> results) const {
    const std::vector<const DeferredProduct*> deferred = deferred_products(values);
    return collectives().all_reduce_for_update(replica_id_, op, values, slice_shards, results, deferred);
  }
  Tensor reduce_scatter(ReduceOp op, const Tensor& value) const {
    return collectives().reduce_scatter(replica_id_, op, value);
  }
  Tensor all_gather(const Tensor& shard, std::vector<int64_t>* rows_before = nullptr) const {
    return collectives().all_gather(replica_id_, shard, rows_before);
  }
  Tensor all_to_all(const Tensor& value, int split_axis, std::span<const int64_t> splits) const {
    return collectives().all_to_all(replica_id_, value, split_axis, splits);
  }
  void all_gather_shards(std::span<Tensor> values) const { collectives().all_gather_shards(replica_id_, values); }
  void share_process_shards(std::span<Tensor> values) const { collectives().share_process_shards(replica_id_, values); }
  void broadcast(Tensor& value, int root) const { collectives().broadcast(replica_id_, value, root); }
  void barrier() const { collectives().barrier(replica_id_); }
  Collectives::GradientArenaPlan gradient_arena_plan() const { return collectives().gradient_arena_plan(replica_id_); }
  int64_t all_reduce_min(int64_t value) const { return collectives().all_reduce_min(replica_id_, value); }
  // True for the first replica this process runs (replica 0 in one process): the one that updates
  // state the process's replicas share on the host (mirrored variables, the optimizer's step).
  bool leads_process() const;
  // Waits for every replica, runs fn once per process (its leading replica's call, with new tensors
  // mirrored), waits again.
  void merge_call(const std::function<void()>& fn) const;

  // The step's body ends with its optimizer update (Model::train_step_on_cores): nothing in this run
  // reads what the update writes, and the next run starts only after every replica of the process has
  // returned. In one process the update then skips the barrier that would end it (across processes,
  // whose next run nobody joins, it keeps it).
  void set_update_ends_run(bool ends) { update_ends_run_ = ends; }
  bool update_ends_run() const { return update_ends_run_; }

  // Kernel gradients left to the optimizer's all-reduce (framework/device/deferred_product.h). A
  // training step allows them where that all-reduce is the only reader of its gradients
  // (Model::train_step_on_cores); an op whose result is such a gradient may then defer() it, leaving
  // the tensor's contents unwritten, and whatever must read it first (the tape adding two gradients
  // of one variable) materialize()s it.
  void allow_deferred_products(bool allow) { deferral_allowed_ = allow; }
  bool allows_deferred_products() const { return deferral_allowed_; }
  void defer(const Tensor& value, std::shared_ptr<const DeferredProduct> product);
  // Computes a deferred value into its tensor and forgets the product; nothing for any other tensor.
  void materialize(const Tensor& value);
  // Each value's deferred product, or null; empty when none is deferred.
  std::vector<const DeferredProduct*> deferred_products(std::span<const Tensor> values) const;

  // `state` was updated by this replica in this step: it is synced when the run ends.
  void mark_for_sync(ReplicaLocalState* state);
  const std::vector<ReplicaLocalState*>& marked_for_sync() const { return marked_; }

 private:
  Collectives& collectives() const;

  ReplicatedStrategy& strategy_;
  Collectives* collectives_;
  int replica_id_;
  int num_replicas_;
  int64_t step_;
  std::vector<ReplicaLocalState*> marked_;
  bool deferral_allowed_ = false;
  bool update_ends_run_ = false;
  std::vector<std::pair<uint64_t, std::shared_ptr<const DeferredProduct>>> deferred_;  // by storage id
};

// This thread's replica context; nullptr outside strategy.run / for_each_replica.
ReplicaContext* current_replica_context();

// RAII: installs `ctx` as this thread's replica context.
class ReplicaContextScope {
 public:
  explicit ReplicaContextScope(ReplicaContext* ctx);
  ~ReplicaContextScope();
  ReplicaContextScope(const ReplicaContextScope&) = delete;
  ReplicaContextScope& operator=(const ReplicaContextScope&) = delete;

 private:
  ReplicaContext* saved_;
};

}  // namespace keel
