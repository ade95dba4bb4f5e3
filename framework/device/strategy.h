// ReplicatedStrategy: TPUStrategy's model of data parallelism over the cores of one device.
//
// Variables created inside scope() are mirrored: charged on every core (one host buffer serves all
// replicas, since they hold identical values). run() executes a step once per core, each as if on a
// thread of its own, with its own GradientTape, its own ledger and its ReplicaContext; everything replicas
// exchange goes through the context's collectives (framework/device/collectives.h), and state
// replicas update on their own (ReplicaLocalState) is combined when the run ends. With more replicas
// than hardware threads, each thread runs several replicas, each on a fiber of its own that gives
// the thread to the next at a barrier (framework/device/replica_scheduler.h), so throughput stays
// that of one replica using every thread; with fewer, each replica's kernels run on its share of the
// threads (framework/core/thread_pool.h), a one-core device on all of them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <type_traits>
#include <vector>

#include "framework/core/tensor.h"
#include "framework/device/context.h"
#include "framework/device/device_spec.h"
#include "framework/device/input_context.h"
#include "framework/device/layout.h"
#include "framework/device/ledger.h"
#include "framework/device/replica_context.h"
#include "framework/device/replica_rows.h"
#include "framework/device/replica_scheduler.h"
#include "framework/device/sharding.h"

namespace keel {

class ProcessGroup;

// Where this thread's tensors are mirrored (a strategy's scope) and its strategy shards at least
// `minimum`: `scope` becomes that strategy's sharded_context(category) until it is destroyed or reset.
// Elsewhere `scope` is left empty and new tensors are charged as before.
void enter_sharded_scope_if(std::optional<ContextScope>& scope, ShardingMode minimum, Category category);
// Where this thread's tensors are mirrored and `axis` >= 0: `scope` becomes the strategy's
// laid_out_context(category, axis) (a LayoutMap's variable or its slots). Elsewhere left empty.
void enter_laid_out_scope_if(std::optional<ContextScope>& scope, int axis, Category category);

// One global batch, or one core's shard of it.
struct Batch {
  Tensor images;  // x: (batch, ...)
  Tensor labels;  // y: (batch, ...)
  int64_t size() const { return images.defined() ? images.dim(0) : 0; }
};

class ReplicatedStrategy {
 public:
  struct Options {
    bool abstract = false;  // plan: tensors have shapes and ledger charges, no storage
    int host_threads = 0;   // 0: keel::host_threads() (this process's share of the machine's threads)
    // Which training state is partitioned across the cores (framework/device/sharding.h); the
    // optimizer and the training step read it.
    ShardingMode shard = ShardingMode::none;
    // The processes sharing the slice (mpirun): this process runs its share of the cores
    // (DeviceSpec::share) and the collectives cross processes through the group. Null or a group of
    // one: every core runs here.
    ProcessGroup* processes = nullptr;
    // Keras 3's LayoutMap (framework/device/layout.h): variables created in scope() whose path it
    // matches are split along an axis across the cores. Null or empty: every variable mirrored.
    // With a layout, `shard` must be none and the slice must run in one process
    // (std::invalid_argument otherwise).
    std::shared_ptr<const distribution::LayoutMap> layout_map = nullptr;
  };
  explicit ReplicatedStrategy(DeviceSpec spec) : ReplicatedStrategy(std::move(spec), Options{}) {}
  ReplicatedStrategy(DeviceSpec spec, Options options);
  ~ReplicatedStrategy();
  ReplicatedStrategy(const ReplicatedStrategy&) = delete;
  ReplicatedStrategy& operator=(const ReplicatedStrategy&) = delete;

  const DeviceSpec& spec() const { return ledger_.spec(); }
  int num_replicas() const { return ledger_.num_cores(); }
  bool abstract() const { return options_.abstract; }
  ShardingMode shard() const { return options_.shard; }
  // The LayoutMap variables created in scope() follow; null when none.
  const distribution::LayoutMap* layout_map() const {
    return options_.layout_map && !options_.layout_map->empty() ? options_.layout_map.get() : nullptr;
  }
  Ledger& ledger() { return ledger_; }
  const Ledger& ledger() const { return ledger_; }

  // The replicas this process runs: [first_local_replica(), first_local_replica() + local_replicas()),
  // every replica unless the slice is shared by several processes. Replica ids stay global.
  int first_local_replica() const { return first_local_; }
  int local_replicas() const { return local_replicas_; }
  bool is_local(int replica) const { return replica >= first_local_ && replica < first_local_ + local_replicas_; }
  // The processes sharing the slice; null in one process.
  ProcessGroup* processes() const { return processes_; }
  // Whether those processes run on one machine and exchange through shared memory (false in one).
  bool processes_share_memory() const { return processes_share_memory_; }
  // Whether each replica updates its shard of the slice's variables (and reads that shard of the
  // mean), rather than its share of its process's: with sharded slots, and unsharded across
  // processes on one machine, where each process updates only its replicas' shards of its copy and
  // the processes then exchange the rest through shared memory (Collectives::share_process_shards),
  // as one process's replicas split an update. The slots of the other processes' shards are then
  // current only there: gather_sharded_state before reading them whole. Between machines every
  // process updates whole variables: exchanging parameters over MPI would cost more than it saves.
  bool updates_slice_shards() const { return shard() != ShardingMode::none || processes_share_memory_; }
  // Which rows of each global batch of `global_batch` rows this process's replicas train on, for an
  // input pipeline that decodes only those (framework/device/input_context.h); all of them in one
  // process.
  InputContext input_context(int64_t global_batch) const;
  // Every process's entries of a per-replica vector (one per replica of the slice) to every process,
  // so that a sum over replicas adds the same values in the same order everywhere. T is trivially
  // copyable. In one process, nothing to do.
  // It also carries the watched signal (watch_signal), at no extra exchange.
  template <class T>
  void gather_per_replica(std::vector<T>& per_replica) const {
    static_assert(std::is_trivially_copyable_v<T>);
    gather_per_replica_bytes(per_replica.data(), static_cast<int64_t>(sizeof(T)));
  }
  // A signal the processes of a slice must act on together (SIGTERM before a preemption: they stop
  // at one step boundary, as TensorFlow's PreemptionCheckpointHandler agrees on a notice). `signal`
  // is non-zero once one arrived here; each gather_per_replica (every training step's) reads it and
  // carries it to every process, and signalled_anywhere() then says whether any process had seen
  // one: the same answer in every process, with no collective of its own. In one process: whether
  // `signal` was set at the last gather. Null stops watching.
  void watch_signal(const std::atomic<int>* signal) { watched_signal_ = signal; }
  bool signalled_anywhere() const { return signalled_anywhere_; }
  // Outside run(): every process's shards of sharded state (each replica's shard_range of every
  // tensor: optimizer slots under ZeRO, and unsharded too where processes share one machine:
  // updates_slice_shards) to every process, whole, as a checkpoint needs them.
  void gather_sharded_state(std::span<Tensor> values) const;

  // While alive, new tensors on this thread are mirrored on every core (category `parameters`).
  ContextScope scope();
  // The context scope() installs, for code that must create mirrored state elsewhere.
  DeviceContext mirrored_context(Category category = Category::parameters) const;
  // Like mirrored_context, but each core is charged only its shard of a new tensor's elements
  // (framework/device/sharding.h); the host holds the whole buffer, each replica touches its shard.
  DeviceContext sharded_context(Category category) const;
  // Like mirrored_context, but each core is charged only its block of `axis` of a new tensor (a
  // variable a LayoutMap splits, or its optimizer slots).
  DeviceContext laid_out_context(Category category, int axis) const;
  // Like mirrored_context, but each core is charged only its replica's rows of a new tensor (its
  // shard_range of dimension 0; a tensor of rank 0 whole): a host program's batch-shaped tensors.
  DeviceContext rows_context(Category category = Category::activations) const;
  // A host context matching this strategy (abstract when planning).
  DeviceContext host_context() const;
  // The context of code running for `core` (its ledger; new tensors are `category`).
  DeviceContext core_context(int core, Category category = Category::activations) const;

  // Splits a host batch into per-core shards, copied to each core (`inputs`, counted as infeed).
  // Shards are as even as possible; the first cores take one more row when it does not divide. In
  // several processes only this process's replicas' shards are filled (the others stay empty).
  std::vector<Batch> distribute(const Batch& global);
  // The same, for a batch the caller hands over: when nothing else holds its tensors (a batch fresh
  // from an input pipeline), each core's shard takes its rows in the batch's memory instead of a copy
  // (Tensor::rows_moved_to_context), charged as the copy would be. `global` is left empty.
  std::vector<Batch> distribute(Batch&& global);

  // Copies replica `replica`'s rows of a host batch to its core (`inputs`, counted as infeed). Must
  // run with that core's context (distribute() and run_distributed() arrange it).
  Batch infeed(const Batch& global, int replica);

  // The global step the next run() executes (ReplicaContext::step()). Each completed run() advances
  // it by one; fit() sets it to the optimizer's iterations before each training step, so a resumed
  // run and a custom loop draw the same random numbers as a straight fit().
  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }

  // run() over distribute(global), with each shard's infeed done on its replica's thread, in
  // parallel, as each core's infeed queue is fed independently on a real device.
  template <class Fn>
  auto run_distributed(Fn&& fn, const Batch& global) -> std::vector<std::invoke_result_t<Fn&, const Batch&>> {
    using R = std::invoke_result_t<Fn&, const Batch&>;
    std::vector<std::optional<R>> results(static_cast<size_t>(num_replicas()));
    run_replicas([&](ReplicaContext& ctx) {
      std::optional<Batch> shard(infeed(global, ctx.replica_id()));
      results[static_cast<size_t>(ctx.replica_id())].emplace(fn(*shard));
    });
    return unwrap(results);
  }

  // Runs fn(shard) once per replica, in parallel; returns the per-replica results (in several
  // processes, those of this process's replicas, in replica order). If any replica
  // throws, the others are cancelled and the first error is rethrown here.
  template <class Fn>
  auto run(Fn&& fn, const std::vector<Batch>& shards) -> std::vector<std::invoke_result_t<Fn&, const Batch&>> {
    using R = std::invoke_result_t<Fn&, const Batch&>;
    std::vector<std::optional<R>> results(static_cast<size_t>(num_replicas()));
    run_replicas([&](ReplicaContext& ctx) {
      const size_t r = static_cast<size_t>(ctx.replica_id());
      results[r].emplace(fn(shards.at(r)));
    });
    return unwrap(results);
  }

  // Combines per-replica tensors of equal shape into one host tensor (counted as outfeed), summed in
  // the collectives' tree order.
  Tensor reduce(ReduceOp op, const std::vector<Tensor>& per_replica);

  // What run() is made of: body(ctx) on every replica's fiber, with its core's context and its
  // ReplicaContext; then the replica-local states marked during the step are synced; then step()
  // advances. Rethrows the first replica's error (the others are cancelled at their next barrier).
  void run_replicas(const std::function<void(ReplicaContext&)>& body);
  // Runs body() once for all the replicas of this process, as one host program over their rows
  // (framework/device/replica_rows.h): on this thread with every compute thread as its share, new
  // tensors in rows_context(), `rows` as the thread's ReplicaRows; then step() advances, as after
  // run_replicas. No ReplicaContext and no collective: the program computes what the replicas would
  // exchange (record_host_all_reduce). One process whose replicas are all local, each with the rows
  // shard_range gives it (std::logic_error otherwise).
  void run_host_program(const ReplicaRows& rows, const std::function<void()>& body);
  // What an all_reduce of `values` (every replica's, of these shapes) holds and moves on each core,
  // for a host program that computed their sums itself: each core's receive buffer, charged and
  // released, and its traffic, as InProcessCollectives counts them.
  void record_host_all_reduce(std::span<const Tensor> values);
  // Whether the running run_replicas combines replica-local state when it ends: whether any
  // ReplicaLocalState existed when it started (ReplicaLocalState::live).
  bool syncs_local_state() const { return syncs_local_state_; }

  // Runs body(replica) for every replica of this process, each with its core's context, spread over at most
  // hardware_concurrency threads with no more threads than cores busy at once. Bodies must not wait
  // for each other (collectives throw here): this is for work each core does alone, such as infeed
  // or an inference step. The first error is rethrown after all bodies finished.
  void for_each_replica(const std::function<void(int)>& body);

 private:
  class Worker;
  void barrier_wait(int replica);
  // Which of a batch's tensors its shards take their rows of in place (Tensor::rows_moved_to_context)
  // instead of copies: a batch handed over that nothing else holds (distribute(Batch&&)).
  struct Handover {
    bool images = false, labels = false;
  };
  Batch infeed_batch(const Batch& global, int replica, Handover handover);
  void sync_replica_local_state(ReplicaContext& ctx);
  void gather_per_replica_bytes(void* per_replica, int64_t bytes_each) const;
  template <class R>
  static std::vector<R> unwrap(std::vector<std::optional<R>>& results) {
    std::vector<R> out;
    out.reserve(results.size());
    for (auto& r : results) {
      if (r) out.push_back(std::move(*r));  // in several processes, this process's replicas' only
    }
    return out;
  }

  Options options_;
  const std::atomic<int>* watched_signal_ = nullptr;
  mutable bool signalled_anywhere_ = false;  // as of the last gather_per_replica
  Ledger ledger_;
  int host_threads_ = 1;
  int kernel_threads_ = 1;  // each replica's share of the threads for its kernels
  ProcessGroup* processes_ = nullptr;  // null: one process
  bool processes_share_memory_ = false;
  int first_local_ = 0;
  int local_replicas_ = 0;
  int64_t step_ = 0;
  bool syncs_local_state_ = true;
  std::unique_ptr<ReplicaScheduler> scheduler_;
  std::unique_ptr<InProcessCollectives> collectives_;
  std::vector<std::unique_ptr<ReplicaContext>> contexts_;  // the running step's, one per local replica
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace keel
