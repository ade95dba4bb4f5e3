// ReplicatedStrategy: TPUStrategy's model of data parallelism over the cores of one device.
//
// Variables created inside scope() are mirrored: charged on every core (one host buffer serves all
// replicas, since they hold identical values). run() executes a step once per core, each on its own
// thread with its own GradientTape and its own ledger; gradients are all-reduced (mean) inside the
// step, and the update is applied once to the mirrored variables. With more replicas than hardware
// threads, replicas take turns on compute slots, so throughput stays that of one replica using every
// thread.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <vector>

#include "framework/core/tensor.h"
#include "framework/device/context.h"
#include "framework/device/device_spec.h"
#include "framework/device/ledger.h"

namespace keel {

enum class ReduceOp { Sum, Mean };

// One global batch, or one core's shard of it.
struct Batch {
  Tensor images;  // x: (batch, ...)
  Tensor labels;  // y: (batch, ...)
  int64_t size() const { return images.defined() ? images.dim(0) : 0; }
};

class ReplicatedStrategy;

// What a replica thread knows about itself (TensorFlow's ReplicaContext).
struct ReplicaContext {
  ReplicatedStrategy* strategy = nullptr;
  int replica_id = 0;
  int num_replicas = 1;
};
// This thread's replica context; nullptr outside strategy.run.
const ReplicaContext* current_replica_context();

class ReplicatedStrategy {
 public:
  struct Options {
    bool abstract = false;  // plan: tensors have shapes and ledger charges, no storage
    int host_threads = 0;   // 0: std::thread::hardware_concurrency()
  };
  explicit ReplicatedStrategy(DeviceSpec spec) : ReplicatedStrategy(std::move(spec), Options{}) {}
  ReplicatedStrategy(DeviceSpec spec, Options options);
  ~ReplicatedStrategy();
  ReplicatedStrategy(const ReplicatedStrategy&) = delete;
  ReplicatedStrategy& operator=(const ReplicatedStrategy&) = delete;

  const DeviceSpec& spec() const { return ledger_.spec(); }
  int num_replicas() const { return ledger_.num_cores(); }
  bool abstract() const { return options_.abstract; }
  Ledger& ledger() { return ledger_; }
  const Ledger& ledger() const { return ledger_; }

  // While alive, new tensors on this thread are mirrored on every core (category `parameters`).
  ContextScope scope();
  // The context scope() installs, for code that must create mirrored state elsewhere.
  DeviceContext mirrored_context(Category category = Category::parameters) const;
  // A host context matching this strategy (abstract when planning).
  DeviceContext host_context() const;
  // The context of code running for `core` (its ledger; new tensors are `category`).
  DeviceContext core_context(int core, Category category = Category::activations) const;

  // Splits a host batch into per-core shards, copied to each core (`inputs`, counted as infeed).
  // Shards are as even as possible; the first cores take one more row when it does not divide.
  std::vector<Batch> distribute(const Batch& global);

  // Copies replica `replica`'s rows of a host batch to its core (`inputs`, counted as infeed). Must
  // run with that core's context (distribute() and run_distributed() arrange it).
  Batch infeed(const Batch& global, int replica);

  // run() over distribute(global), with each shard's infeed done on its replica's thread, in
  // parallel, as each core's infeed queue is fed independently on a real device.
  template <class Fn>
  auto run_distributed(Fn&& fn, const Batch& global) -> std::vector<std::invoke_result_t<Fn&, const Batch&>> {
    using R = std::invoke_result_t<Fn&, const Batch&>;
    std::vector<std::optional<R>> results(static_cast<size_t>(num_replicas()));
    run_replicas([&](int r) {
      std::optional<Batch> shard(infeed(global, r));
      results[static_cast<size_t>(r)].emplace(fn(*shard));
    });
    std::vector<R> out;
    out.reserve(results.size());
    for (auto& r : results) out.push_back(std::move(*r));
    return out;
  }

  // Runs fn(shard) once per replica, in parallel; returns the per-replica results. If any replica
  // throws, the others are cancelled and the first error is rethrown here.
  template <class Fn>
  auto run(Fn&& fn, const std::vector<Batch>& shards) -> std::vector<std::invoke_result_t<Fn&, const Batch&>> {
    using R = std::invoke_result_t<Fn&, const Batch&>;
    std::vector<std::optional<R>> results(static_cast<size_t>(num_replicas()));
    run_replicas([&](int r) { results[static_cast<size_t>(r)].emplace(fn(shards.at(static_cast<size_t>(r)))); });
    std::vector<R> out;
    out.reserve(results.size());
    for (auto& r : results) out.push_back(std::move(*r));
    return out;
  }

  // Combines per-replica tensors of equal shape into one host tensor (counted as outfeed).
  Tensor reduce(ReduceOp op, const std::vector<Tensor>& per_replica);

  // --- Cross-replica operations, called from inside run() by every replica. ---
  // After it returns, replica 0's `grads` hold the mean over replicas (elementwise, summed in
  // replica order, so the result does not depend on scheduling).
  void all_reduce_mean(std::vector<Tensor>& grads);
  // Waits for every replica, runs `fn` once (replica 0's, in the mirrored context), waits again.
  void merge_call(const std::function<void()>& fn);
  // all_reduce_mean fused with what consumes it: once every replica has contributed, each replica
  // reduces a strided share of the tensors into replica 0's buffers and calls apply(i, mean_i) on
  // each of them; returns when all are applied. Two barriers instead of four, and the update runs
  // in parallel. `apply` must only touch state belonging to tensor i. `once` runs on replica 0
  // between the two barriers (after every replica has read shared state, before any continues).
  void all_reduce_mean_and_apply(std::vector<Tensor>& grads, const std::function<void(size_t, const Tensor&)>& apply,
                                 const std::function<void()>& once = nullptr);

  // Low level: runs body(replica) on every replica thread and waits.
  void run_replicas(const std::function<void(int)>& body);

  // Runs body(replica) for every replica, each with its core's context, spread over at most
  // hardware_concurrency threads with no more threads than cores busy at once. Bodies must not
  // wait for each other (no cross-replica calls inside): this is how fit() runs the phases of a
  // step without oversubscribing the host. The first error is rethrown after all bodies finished.
  void for_each_replica(const std::function<void(int)>& body);
  // Mean over replicas of per_replica[r][i] for each i, into per_replica[0][i] (summed in replica
  // order), then apply(i, mean); the tensors are shared out over for_each_replica.
  void reduce_mean_and_apply(std::vector<std::vector<Tensor>>& per_replica,
                             const std::function<void(size_t, const Tensor&)>& apply);

 private:
  class Worker;
  class ComputeSlots;
  struct Barrier;
  void barrier_wait(int replica);

  Options options_;
  Ledger ledger_;
  int host_threads_ = 1;
  std::unique_ptr<ComputeSlots> slots_;
  std::unique_ptr<Barrier> barrier_;
  std::vector<std::vector<Tensor>*> reduce_inputs_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace keel
