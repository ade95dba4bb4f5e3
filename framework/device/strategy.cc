#include "framework/device/strategy.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "framework/core/float_environment.h"
#include "framework/core/host_threads.h"
#include "framework/core/spin_wait.h"
#include "framework/core/thread_pool.h"
#include "framework/device/process_group.h"

namespace keel {

// A persistent host thread (a slot of the scheduler): runs one job at a time. Both sides of a
// hand-off spin a little before sleeping: the steps of a small model follow each other within
// microseconds, and a condition variable's wake-up costs tens of them on a virtual machine.
class ReplicatedStrategy::Worker {
 public:
  Worker() : thread_([this] { loop(); }) {}
  ~Worker() {
    set(stop_);
    thread_.join();
  }
  void post(std::function<void()> job) {
    job_ = std::move(job);  // the thread reads it only after it sees pending_, set below
    done_.store(false, std::memory_order_relaxed);
    set(pending_);
  }
  void wait() { await(done_); }

 private:
  void loop() {
    for (;;) {
      await_either(pending_, stop_);
      if (stop_.load(std::memory_order_acquire)) return;
      pending_.store(false, std::memory_order_relaxed);
      std::function<void()> job = std::move(job_);
      job_ = nullptr;
      job();
      set(done_);
    }
  }
  void set(std::atomic<bool>& flag) {
    flag.store(true, std::memory_order_release);
    {
      std::lock_guard<std::mutex> lock(mu_);  // a waiter between its check and its sleep holds it
      if (sleepers_ == 0) return;
    }
    cv_.notify_all();
  }
  void await(std::atomic<bool>& flag) { await_either(flag, flag); }
  void await_either(std::atomic<bool>& a, std::atomic<bool>& b) {
    auto ready = [&] { return a.load(std::memory_order_acquire) || b.load(std::memory_order_acquire); };
    spin_until(ready, kSpinBeforeSleep);
    if (ready()) return;
    std::unique_lock<std::mutex> lock(mu_);
    ++sleepers_;
    cv_.wait(lock, ready);
    --sleepers_;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  int sleepers_ = 0;  // guarded by mu_
  std::function<void()> job_;
  std::atomic<bool> pending_{false};
  std::atomic<bool> done_{true};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

ReplicatedStrategy::ReplicatedStrategy(DeviceSpec spec, Options options)
    : options_(options), ledger_(std::move(spec)) {
  int hw = options_.host_threads > 0 ? options_.host_threads : keel::host_threads();
  hw = std::max(hw, 1);
  host_threads_ = hw;
  local_replicas_ = num_replicas();
  if (options_.processes != nullptr && options_.processes->size() > 1) {
    processes_ = options_.processes;
    processes_share_memory_ = processes_->shares_memory();  // collective: every process constructs alike
    const ProcessShare share = ledger_.spec().share(processes_->size(), processes_->rank());
    first_local_ = share.first_core;
    local_replicas_ = share.cores;
  }
  if (layout_map() != nullptr && options_.shard != ShardingMode::none) {
    throw std::invalid_argument(std::string("a LayoutMap places variables itself: it runs with sharding none, not ") +
                                sharding_mode_name(options_.shard));
  }
  if (layout_map() != nullptr && processes_ != nullptr) {
    throw std::invalid_argument("a LayoutMap runs in one process: keel's column-parallel exchange does not cross processes yet (`--layout none` drops a resumed run's layout)");
  }
  const int n = local_replicas_;
  scheduler_ = std::make_unique<ReplicaScheduler>(n, std::min(hw, n));
  // Each replica computing runs its kernels on its share of the threads (framework/core/thread_pool.h).
  kernel_threads_ = std::max(1, hw / std::min(hw, n));
  collectives_ = std::make_unique<InProcessCollectives>(ledger_, num_replicas(), first_local_, n, processes_,
                                                        [this](int replica) { barrier_wait(replica); });
  for (int s = 0; s < scheduler_->slots(); ++s) workers_.push_back(std::make_unique<Worker>());
}

ReplicatedStrategy::~ReplicatedStrategy() = default;

DeviceContext ReplicatedStrategy::mirrored_context(Category category) const {
  DeviceContext ctx;
  ctx.ledger = const_cast<Ledger*>(&ledger_);
  ctx.strategy = const_cast<ReplicatedStrategy*>(this);
  ctx.core = -1;
  ctx.abstract = options_.abstract;
  ctx.category = category;
  return ctx;
}

DeviceContext ReplicatedStrategy::sharded_context(Category category) const {
  DeviceContext ctx = mirrored_context(category);
  ctx.sharded = true;
  return ctx;
}

DeviceContext ReplicatedStrategy::laid_out_context(Category category, int axis) const {
  DeviceContext ctx = mirrored_context(category);
  ctx.shard_axis = axis;
  return ctx;
}

void enter_sharded_scope_if(std::optional<ContextScope>& scope, ShardingMode minimum, Category category) {
  const DeviceContext& here = device_context();
  if (here.strategy != nullptr && here.ledger != nullptr && here.core < 0 && here.strategy->shard() >= minimum) {
    scope.emplace(here.strategy->sharded_context(category));
  }
}

void enter_laid_out_scope_if(std::optional<ContextScope>& scope, int axis, Category category) {
  const DeviceContext& here = device_context();
  if (axis >= 0 && here.strategy != nullptr && here.ledger != nullptr && here.core < 0) {
    scope.emplace(here.strategy->laid_out_context(category, axis));
  }
}

DeviceContext ReplicatedStrategy::rows_context(Category category) const {
  DeviceContext ctx = mirrored_context(category);
  ctx.shard_axis = 0;
  return ctx;
}

DeviceContext ReplicatedStrategy::host_context() const {
  DeviceContext ctx;
  ctx.strategy = const_cast<ReplicatedStrategy*>(this);
  ctx.abstract = options_.abstract;
  return ctx;
}

DeviceContext ReplicatedStrategy::core_context(int core, Category category) const {
  DeviceContext ctx;
  ctx.ledger = const_cast<Ledger*>(&ledger_);
  ctx.strategy = const_cast<ReplicatedStrategy*>(this);
  ctx.core = core;
  ctx.abstract = options_.abstract;
  ctx.category = category;
  return ctx;
}

ContextScope ReplicatedStrategy::scope() { return ContextScope(mirrored_context()); }

Batch ReplicatedStrategy::infeed(const Batch& global, int replica) { return infeed_batch(global, replica, {}); }

Batch ReplicatedStrategy::infeed_batch(const Batch& global, int replica, Handover handover) {
  const ShardRange rows = shard_range(global.size(), num_replicas(), replica);
  auto to_core = [&](const Tensor& t, bool in_place, const char* owner) {
    return in_place ? t.rows_moved_to_context(rows.begin, rows.end, Category::inputs, owner)
                    : t.slice_rows(rows.begin, rows.end).clone(Category::inputs, owner);
  };
  CoreLedger& core = ledger_.core(replica);
  Batch shard;
  shard.images = to_core(global.images, handover.images, "infeed:images");
  core.record_host_to_core(shard.images.bytes());
  if (global.labels.defined()) {
    shard.labels = to_core(global.labels, handover.labels, "infeed:labels");
    core.record_host_to_core(shard.labels.bytes());
  }
  return shard;
}

InputContext ReplicatedStrategy::input_context(int64_t global_batch) const {
  if (processes_ == nullptr) return keel::input_context(spec(), 1, 0, global_batch);
  return keel::input_context(spec(), processes_->size(), processes_->rank(), global_batch);
}

std::vector<Batch> ReplicatedStrategy::distribute(const Batch& global) { return distribute(Batch(global)); }

// A batch nothing else holds (fresh from an input pipeline) gives each core its rows in place, in
// the batch's own memory: the copies were pure cost. With one core its shard is the whole batch (the seed MLP on
// `cpu` gained 12% samples/s, 5 interleaved pairs of bench/mlp_throughput --epochs 6 on 2 threads,
// best epochs); on `v3-8` the copies were 2.8% of a step's CPU time, on the calling thread while
// the other slots wait (perf record of bench/mlp_throughput --device v3-8 on one thread). A batch
// the caller still holds (distribute(const Batch&)) is copied all the same.
std::vector<Batch> ReplicatedStrategy::distribute(Batch&& global) {
  const Handover handover{global.images.defined() && global.images.movable_to_context(),
                          global.labels.defined() && global.labels.movable_to_context()};
  const Batch batch = std::move(global);
  std::vector<Batch> shards(static_cast<size_t>(num_replicas()));
  for (int c = first_local_; c < first_local_ + local_replicas_; ++c) {
    ContextScope on_core(core_context(c, Category::inputs));
    shards[static_cast<size_t>(c)] = infeed_batch(batch, c, handover);
  }
  return shards;
}

void ReplicatedStrategy::run_replicas(const std::function<void(ReplicaContext&)>& body) {
  const int n = local_replicas_;
  // Created here, not on the replica threads: a replica still reading another's marks at the end of
  // the step must not outlive that replica's context.
  contexts_.clear();
  for (int l = 0; l < n; ++l) {
    contexts_.push_back(std::make_unique<ReplicaContext>(*this, collectives_.get(), first_local_ + l, num_replicas(), step_));
  }
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::atomic<bool> failed{false};
  syncs_local_state_ = ReplicaLocalState::live() > 0;  // decided once, before any replica runs
  // Each replica on its fiber, on the thread of its slot (ReplicaScheduler).
  const std::function<void(int)> replica = [&](int l) {
    const int r = first_local_ + l;
    ReplicaContext& ctx = *contexts_[static_cast<size_t>(l)];
    ReplicaContextScope in_replica(&ctx);
    ContextScope on_core(core_context(r));
    KernelThreadsScope share(kernel_threads_);
    const FlushSubnormals flush;  // this fiber's (framework/core/float_environment.h)
    try {
      body(ctx);
      sync_replica_local_state(ctx);
    } catch (const ReplicaCancelled&) {
      errors[static_cast<size_t>(l)] = std::current_exception();
    } catch (...) {
      errors[static_cast<size_t>(l)] = std::current_exception();
      failed = true;
      scheduler_->abort();
    }
  };
  // Slot 0 on this thread: one hand-off fewer per step.
  const int slots = scheduler_->slots();
  for (int s = 1; s < slots; ++s) workers_[static_cast<size_t>(s)]->post([this, &replica, s] { scheduler_->run_slot(s, replica); });
  scheduler_->run_slot(0, replica);
  for (int s = 1; s < slots; ++s) workers_[static_cast<size_t>(s)]->wait();
  scheduler_->reset();
  contexts_.clear();
  if (failed) {
    // The first real error, not a cancellation it caused.
    for (auto& e : errors) {
      if (!e) continue;
      try {
        std::rethrow_exception(e);
      } catch (const ReplicaCancelled&) {
        continue;
      } catch (...) {
        throw;
      }
    }
  }
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  ++step_;
}

void ReplicatedStrategy::run_host_program(const ReplicaRows& rows, const std::function<void()>& body) {
  if (processes_ != nullptr || local_replicas_ != num_replicas() || rows.replicas() != num_replicas()) {
    throw std::logic_error("run_host_program: one process running every replica, one row range each");
  }
  for (int r = 0; r < rows.replicas(); ++r) {
    const ShardRange mine = shard_range(rows.total(), num_replicas(), r);
    if (mine.begin != rows.begin(r) || mine.end != rows.end(r)) {
      throw std::logic_error("run_host_program: replica " + std::to_string(r) + "'s rows are not its shard of the batch");
    }
  }
  {
    ContextScope on_cores(rows_context());
    ReplicaRowsScope in_rows(&rows);
    KernelThreadsScope share(host_threads_);
    const FlushSubnormals flush;  // as every replica's fiber
    body();
  }
  ++step_;
}

void ReplicatedStrategy::record_host_all_reduce(std::span<const Tensor> values) {
  for (int r = first_local_; r < first_local_ + local_replicas_; ++r) collectives_->record_host_all_reduce(r, values);
}

void ReplicatedStrategy::sync_replica_local_state(ReplicaContext& ctx) {
  if (!syncs_local_state_) return;  // none existed when the run started: nothing can be marked
  if (local_replicas_ > 1) barrier_wait(ctx.replica_id());  // every local replica's marks are in
  std::vector<ReplicaLocalState*> marked;
  for (const auto& c : contexts_) marked.insert(marked.end(), c->marked_for_sync().begin(), c->marked_for_sync().end());
  std::sort(marked.begin(), marked.end(), [](const ReplicaLocalState* a, const ReplicaLocalState* b) {
    return a->creation_order() < b->creation_order();
  });
  marked.erase(std::unique(marked.begin(), marked.end()), marked.end());
  std::vector<Tensor> contributions;
  std::vector<size_t> ends;  // of each state's contributions
  for (ReplicaLocalState* state : marked) {
    for (Tensor& t : state->replica_contributions(ctx)) contributions.push_back(std::move(t));
    ends.push_back(contributions.size());
  }
  if (!contributions.empty()) ctx.all_reduce(ReduceOp::Mean, contributions);
  size_t begin = 0;
  for (size_t i = 0; i < marked.size(); ++i) {
    marked[i]->take_means(ctx, std::span<Tensor>(contributions).subspan(begin, ends[i] - begin));
    begin = ends[i];
  }
}

void ReplicatedStrategy::for_each_replica(const std::function<void(int)>& body) {
  const int n = local_replicas_;
  const int threads = std::min(host_threads_, n);
  std::atomic<int> next{0};
  std::atomic<bool> failed{false};
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  auto drain = [&] {
      KernelThreadsScope kernels(kernel_threads_);
      const FlushSubnormals flush;
      for (int l = next++; l < n && !failed; l = next++) {
        const int r = first_local_ + l;
        ReplicaContext rc(*this, /*collectives=*/nullptr, r, num_replicas(), step_);
        ReplicaContextScope in_replica(&rc);
        ContextScope on_core(core_context(r));
        try {
          body(r);
        } catch (...) {
          errors[static_cast<size_t>(l)] = std::current_exception();
          failed = true;
        }
      }
  };
  if (current_replica_context() == nullptr) {
    // This thread drains too: one hand-off fewer (none for one thread's worth of work).
    for (int t = 1; t < threads; ++t) workers_[static_cast<size_t>(t)]->post(drain);
    drain();
    for (int t = 1; t < threads; ++t) workers_[static_cast<size_t>(t)]->wait();
  } else {
    for (int t = 0; t < threads; ++t) workers_[static_cast<size_t>(t)]->post(drain);
    for (int t = 0; t < threads; ++t) workers_[static_cast<size_t>(t)]->wait();
  }
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

void ReplicatedStrategy::barrier_wait(int replica) { scheduler_->barrier(replica - first_local_); }

void ReplicatedStrategy::gather_per_replica_bytes(void* per_replica, int64_t bytes_each) const {
  const bool signalled = watched_signal_ != nullptr && watched_signal_->load() != 0;
  if (processes_ == nullptr) {
    signalled_anywhere_ = signalled;
    return;
  }
  // Each process's block of entries, then one byte: whether its watched signal was set.
  char* base = static_cast<char*>(per_replica);
  const int64_t block = local_replicas_ * bytes_each, stride = block + 1;
  std::vector<char> mine(static_cast<size_t>(stride)), all(static_cast<size_t>(stride * processes_->size()));
  std::copy_n(base + first_local_ * bytes_each, block, mine.data());
  mine[static_cast<size_t>(block)] = signalled ? 1 : 0;
  processes_->all_gather_bytes(mine.data(), stride, all.data());
  bool any = false;
  for (int p = 0; p < processes_->size(); ++p) {
    std::copy_n(all.data() + p * stride, block, base + p * block);
    any = any || all[static_cast<size_t>(p * stride + block)] != 0;
  }
  signalled_anywhere_ = any;
}

void ReplicatedStrategy::gather_sharded_state(std::span<Tensor> values) const {
  if (processes_ == nullptr) return;
  for (Tensor& t : values) {
    if (!t.defined() || t.is_abstract()) continue;
    processes_->all_gather_ranges(std::span<float>(t.data(), static_cast<size_t>(t.size())),
                                  process_shard_ranges(t.size(), num_replicas(), local_replicas_));
  }
}

Tensor ReplicatedStrategy::reduce(ReduceOp op, const std::vector<Tensor>& per_replica) {
  if (per_replica.empty()) throw std::invalid_argument("reduce: no per-replica values");
  ContextScope host(host_context());
  Tensor out = Tensor::empty(per_replica[0].shape());
  std::vector<const float*> in;
  for (size_t r = 0; r < per_replica.size(); ++r) {
    const Tensor& t = per_replica[r];
    if (t.shape() != out.shape()) throw std::invalid_argument("reduce: per-replica values differ in shape");
    if (r < static_cast<size_t>(num_replicas())) ledger_.core(static_cast<int>(r)).record_core_to_host(t.bytes());
    in.push_back(t.data());
  }
  if (out.is_abstract() || per_replica[0].is_abstract()) return out;
  const FlushSubnormals flush;  // as the replicas sum
  tree_sum(in, out.data(), out.size());
  if (op == ReduceOp::Mean) out.array() /= static_cast<float>(per_replica.size());
  return out;
}

}  // namespace keel
