#include "framework/device/strategy.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>

namespace keel {
namespace {

thread_local ReplicaContext* tls_replica_context = nullptr;

// Thrown in replicas woken from a barrier because another replica failed.
struct ReplicaCancelled : std::runtime_error {
  ReplicaCancelled() : std::runtime_error("replica cancelled because another replica failed") {}
};

}  // namespace

const ReplicaContext* current_replica_context() { return tls_replica_context; }

// A counting semaphore: at most `count` replicas compute at once.
class ReplicatedStrategy::ComputeSlots {
 public:
  explicit ComputeSlots(int count) : free_(count) {}
  void acquire() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return free_ > 0; });
    --free_;
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++free_;
    }
    cv_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int free_;
};

// A reusable barrier that can be aborted: waiters then throw ReplicaCancelled.
struct ReplicatedStrategy::Barrier {
  explicit Barrier(int n) : count(n) {}
  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    if (aborted) throw ReplicaCancelled();
    const uint64_t gen = generation;
    if (++arrived == count) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    cv.wait(lock, [&] { return generation != gen || aborted; });
    if (generation == gen && aborted) throw ReplicaCancelled();
  }
  void abort() {
    std::lock_guard<std::mutex> lock(mu);
    aborted = true;
    cv.notify_all();
  }
  void reset() {
    std::lock_guard<std::mutex> lock(mu);
    aborted = false;
    arrived = 0;
  }
  const int count;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  bool aborted = false;
};

// A persistent thread for one replica: runs one job at a time on its core.
class ReplicatedStrategy::Worker {
 public:
  explicit Worker(int replica) : thread_([this, replica] { loop(replica); }) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void post(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = std::move(job);
      done_ = false;
    }
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
  }

 private:
  void loop(int replica) {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || job_ != nullptr; });
      if (stop_) return;
      std::function<void()> job = std::move(job_);
      job_ = nullptr;
      lock.unlock();
      job();
      lock.lock();
      done_ = true;
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> job_;
  bool done_ = true;
  bool stop_ = false;
  std::thread thread_;
};

ReplicatedStrategy::ReplicatedStrategy(DeviceSpec spec, Options options)
    : options_(options), ledger_(std::move(spec)) {
  int hw = options_.host_threads > 0 ? options_.host_threads : static_cast<int>(std::thread::hardware_concurrency());
  hw = std::max(hw, 1);
  host_threads_ = hw;
  const int n = num_replicas();
  slots_ = std::make_unique<ComputeSlots>(std::min(hw, n));
  barrier_ = std::make_unique<Barrier>(n);
  reduce_inputs_.assign(static_cast<size_t>(n), nullptr);
  for (int r = 0; r < n; ++r) workers_.push_back(std::make_unique<Worker>(r));
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

Batch ReplicatedStrategy::infeed(const Batch& global, int replica) {
  const int n = num_replicas();
  const int64_t rows = global.size();
  // Shards as even as possible; the first rows % n cores take one more row.
  const int64_t count = rows / n + (replica < rows % n ? 1 : 0);
  const int64_t begin = replica * (rows / n) + std::min<int64_t>(replica, rows % n);
  CoreLedger& core = ledger_.core(replica);
  Batch shard;
  shard.images = global.images.slice_rows(begin, begin + count).clone(Category::inputs, "infeed:images");
  core.record_host_to_core(shard.images.bytes());
  if (global.labels.defined()) {
    shard.labels = global.labels.slice_rows(begin, begin + count).clone(Category::inputs, "infeed:labels");
    core.record_host_to_core(shard.labels.bytes());
  }
  return shard;
}

std::vector<Batch> ReplicatedStrategy::distribute(const Batch& global) {
  const int n = num_replicas();
  std::vector<Batch> shards;
  shards.reserve(static_cast<size_t>(n));
  for (int c = 0; c < n; ++c) {
    ContextScope on_core(core_context(c, Category::inputs));
    shards.push_back(infeed(global, c));
  }
  return shards;
}

void ReplicatedStrategy::run_replicas(const std::function<void(int)>& body) {
  const int n = num_replicas();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::atomic<bool> failed{false};
  for (int r = 0; r < n; ++r) {
    workers_[static_cast<size_t>(r)]->post([&, r] {
      ReplicaContext rc{this, r, n};
      tls_replica_context = &rc;
      ContextScope on_core(core_context(r));
      slots_->acquire();
      try {
        body(r);
      } catch (const ReplicaCancelled&) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
        failed = true;
        barrier_->abort();
      }
      slots_->release();
      tls_replica_context = nullptr;
    });
  }
  for (auto& w : workers_) w->wait();
  barrier_->reset();
  std::fill(reduce_inputs_.begin(), reduce_inputs_.end(), nullptr);
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
}

void ReplicatedStrategy::for_each_replica(const std::function<void(int)>& body) {
  const int n = num_replicas();
  const int threads = std::min(host_threads_, n);
  std::atomic<int> next{0};
  std::atomic<bool> failed{false};
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  auto drain = [&] {
      for (int r = next++; r < n && !failed; r = next++) {
        ReplicaContext rc{this, r, n};
        tls_replica_context = &rc;
        ContextScope on_core(core_context(r));
        try {
          body(r);
        } catch (...) {
          errors[static_cast<size_t>(r)] = std::current_exception();
          failed = true;
        }
        tls_replica_context = nullptr;
      }
  };
  if (threads == 1 && tls_replica_context == nullptr) {
    drain();  // one thread's worth of work: no hand-off to a worker
  } else {
    for (int t = 0; t < threads; ++t) workers_[static_cast<size_t>(t)]->post(drain);
    for (int t = 0; t < threads; ++t) workers_[static_cast<size_t>(t)]->wait();
  }
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

void ReplicatedStrategy::reduce_mean_and_apply(std::vector<std::vector<Tensor>>& per_replica,
                                               const std::function<void(size_t, const Tensor&)>& apply) {
  const int n = num_replicas();
  if (static_cast<int>(per_replica.size()) != n) throw std::logic_error("reduce_mean_and_apply: one list per replica");
  std::vector<Tensor>& out = per_replica[0];
  for (int r = 1; r < n; ++r) {
    if (per_replica[static_cast<size_t>(r)].size() != out.size()) {
      throw std::logic_error("reduce_mean_and_apply: replicas contributed different gradients");
    }
  }
  const float inv = 1.0f / static_cast<float>(n);
  for_each_replica([&](int shard) {
    for (size_t i = static_cast<size_t>(shard); i < out.size(); i += static_cast<size_t>(n)) {
      if (!out[i].defined()) continue;
      if (n > 1 && !out[i].is_abstract()) {
        auto acc = out[i].array();
        for (int r = 1; r < n; ++r) {
          const Tensor& other = per_replica[static_cast<size_t>(r)][i];
          if (other.size() != out[i].size()) throw std::logic_error("reduce_mean_and_apply: gradient sizes differ");
          acc += other.array();
        }
        acc *= inv;
      }
      apply(i, out[i]);
    }
  });
}

void ReplicatedStrategy::barrier_wait(int replica) {
  // A waiting replica gives its compute slot to one that still has work.
  slots_->release();
  try {
    barrier_->wait();
  } catch (...) {
    slots_->acquire();
    throw;
  }
  slots_->acquire();
}

void ReplicatedStrategy::all_reduce_mean(std::vector<Tensor>& grads) {
  all_reduce_mean_and_apply(grads, [](size_t, const Tensor&) {});
}

void ReplicatedStrategy::all_reduce_mean_and_apply(std::vector<Tensor>& grads,
                                                   const std::function<void(size_t, const Tensor&)>& apply,
                                                   const std::function<void()>& once) {
  const ReplicaContext* rc = current_replica_context();
  if (rc == nullptr || rc->strategy != this) throw std::logic_error("all_reduce_mean called outside strategy.run");
  const int n = rc->num_replicas;
  if (n == 1) {
    for (size_t i = 0; i < grads.size(); ++i) {
      if (grads[i].defined()) apply(i, grads[i]);
    }
    if (once) once();
    return;
  }
  reduce_inputs_[static_cast<size_t>(rc->replica_id)] = &grads;
  barrier_wait(rc->replica_id);
  // Every replica reduces a strided share of the tensors into replica 0's buffers, summing in replica
  // order so the result does not depend on scheduling, then applies it.
  std::vector<Tensor>& out = *reduce_inputs_[0];
  const float inv = 1.0f / static_cast<float>(n);
  for (size_t i = static_cast<size_t>(rc->replica_id); i < out.size(); i += static_cast<size_t>(n)) {
    if (!out[i].defined()) continue;
    if (!out[i].is_abstract()) {
      auto acc = out[i].array();
      for (int r = 1; r < n; ++r) {
        const std::vector<Tensor>& other = *reduce_inputs_[static_cast<size_t>(r)];
        if (other.size() != out.size() || other[i].size() != out[i].size()) {
          throw std::logic_error("all_reduce_mean: replicas contributed different gradients");
        }
        acc += other[i].array();
      }
      acc *= inv;
    }
    apply(i, out[i]);
  }
  if (rc->replica_id == 0 && once) once();
  // After this barrier replica 0 may return and free its vector: nothing here reads it again.
  barrier_wait(rc->replica_id);
}

void ReplicatedStrategy::merge_call(const std::function<void()>& fn) {
  const ReplicaContext* rc = current_replica_context();
  if (rc == nullptr || rc->strategy != this) {
    ContextScope mirrored(mirrored_context());
    fn();
    return;
  }
  if (rc->num_replicas > 1) barrier_wait(rc->replica_id);
  if (rc->replica_id == 0) {
    ContextScope mirrored(mirrored_context());
    fn();
  }
  if (rc->num_replicas > 1) barrier_wait(rc->replica_id);
}

Tensor ReplicatedStrategy::reduce(ReduceOp op, const std::vector<Tensor>& per_replica) {
  if (per_replica.empty()) throw std::invalid_argument("reduce: no per-replica values");
  ContextScope host(host_context());
  Tensor out = Tensor::zeros(per_replica[0].shape());
  for (size_t r = 0; r < per_replica.size(); ++r) {
    const Tensor& t = per_replica[r];
    if (t.shape() != out.shape()) throw std::invalid_argument("reduce: per-replica values differ in shape");
    if (r < static_cast<size_t>(num_replicas())) ledger_.core(static_cast<int>(r)).record_core_to_host(t.bytes());
    if (!out.is_abstract() && !t.is_abstract()) out.array() += t.array();
  }
  if (op == ReduceOp::Mean && !out.is_abstract()) out.array() /= static_cast<float>(per_replica.size());
  return out;
}

}  // namespace keel
