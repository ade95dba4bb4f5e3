// The process's compute threads, shared by the replicas and their kernels.
//
// host_threads() threads compute in a process: the replica threads of a strategy (at most that many at
// once, framework/device/replica_scheduler.h) and, when there are fewer replicas than threads, helpers
// from this pool inside each replica's kernels. A thread's share, kernel_threads(), is how many threads
// (itself included) its parallel_for may use: the strategy gives each replica host_threads() divided
// by the replicas computing at once, so the total never oversubscribes the machine; a one-replica
// device (`cpu`) uses every thread. Other threads have a share of 1 unless a KernelThreadsScope says
// otherwise.
//
// Kernels split their work into tasks whose bounds depend on the problem's shape alone, never on the
// share, and each task's arithmetic does not depend on which thread runs it, nor on what the others
// do: results are bit-identical whatever the number of threads (tests/core/thread_pool_test.cc, and
// every kernel's own test). Every task computes with subnormal floats as zero
// (framework/core/float_environment.h), the caller's share and a one-thread loop too. A thread out
// of work polls for more for 100 us (thread_pool.cc's kSpin), then sleeps on a condition variable.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "framework/core/float_environment.h"

namespace keel {

// This thread's share of the pool for its kernels: at least 1.
int kernel_threads();

// Sets this thread's share for the scope's lifetime (values below 1 mean 1).
class KernelThreadsScope {
 public:
  explicit KernelThreadsScope(int threads);
  ~KernelThreadsScope();
  KernelThreadsScope(const KernelThreadsScope&) = delete;
  KernelThreadsScope& operator=(const KernelThreadsScope&) = delete;

 private:
  int saved_;
};

namespace detail {
using TaskFunction = void (*)(void* body, int64_t task);
// Runs fn(body, t) for every t in [0, tasks) on this thread and up to `helpers` pool threads. The
// first exception a task throws is rethrown here after every task has run or been skipped.
void run_tasks(int64_t tasks, int helpers, TaskFunction fn, void* body);
}  // namespace detail

// body(task) for task in [0, tasks), spread over this thread's share (kernel_threads()), at most
// `max_threads` threads. Returns when every task has run. Each task must touch only what no other task
// touches; which thread runs it changes nothing.
template <class Body>
void parallel_for(int64_t tasks, Body&& body, int max_threads = 1 << 30) {
  if (tasks <= 0) return;
  int threads = kernel_threads();
  if (max_threads < threads) threads = max_threads;
  if (tasks < threads) threads = static_cast<int>(tasks);
  if (threads <= 1) {
    const FlushSubnormals flush;  // as the pool's tasks: one mode whatever the thread count
    for (int64_t t = 0; t < tasks; ++t) body(t);
    return;
  }
  using B = std::remove_reference_t<Body>;
  detail::run_tasks(tasks, threads - 1, [](void* b, int64_t t) { (*static_cast<B*>(b))(t); },
                    const_cast<void*>(static_cast<const void*>(&body)));
}

// A helper is worth at least this much work: floating-point operations of a product (~0.1-0.2 ms on
// one core), elements of memory-bound elementwise work (256 KiB of float32; at 1 MiB, until
// 2026-11-29, ResNet50's BatchNormalization, bias and ReLU passes deep in the network at 32x32 ran on
// one of two threads, and a step took its second thread's help where the helper, polling from the
// last op, was at hand).
inline constexpr double kMinFlopsPerThread = 1.6e7;
inline constexpr double kMinElementsPerThread = 1 << 16;

// How many threads a parallel_for over `work` (arithmetic operations, or elements touched) is worth:
// one per `grain` of it, at least 1. What keeps small work on its own thread, where waking a helper
// (tens of microseconds on a virtual machine) would cost more than it saves.
inline int threads_worth(double work, double grain) {
  const double t = work / grain;
  return t < 1 ? 1 : t > (1 << 20) ? (1 << 20) : static_cast<int>(t);
}

}  // namespace keel
