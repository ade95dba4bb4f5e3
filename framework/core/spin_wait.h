// Polling a condition for a while before sleeping on it: a hand-off between two busy threads takes
// microseconds this way, where a condition variable's wake-up costs tens of them on a virtual machine.
#pragma once

#include <chrono>
#include <thread>

namespace keel {

// How long a thread that has run out of work polls before sleeping: longer than the gaps between a
// small step's products (the seed MLP's), shorter than what it would take from the input pipeline's
// thread, to which it yields the core while it polls. Measured on 2 cores (bench/mlp_throughput,
// cpu, 2 threads, interleaved pairs): 100 us 11% faster than sleeping at once (6 pairs), 200 us
// slower; yielding while polling 5% faster than not (10 pairs), and `keel train`'s wait for input
// 6-14% of the step time instead of 17-23%. The kernels' pool, the replicas' hand-offs and their
// barriers (framework/device/replica_scheduler.cc) use it.
inline constexpr std::chrono::microseconds kSpinBeforeSleep{100};

// Polls done() until it holds or `budget` has passed; returns done(). Yields the core every 64 polls,
// so that a runnable thread (the input pipeline's) runs first.
template <class Done>
bool spin_until(Done&& done, std::chrono::microseconds budget) {
  const auto until = std::chrono::steady_clock::now() + budget;
  for (int i = 0;; ++i) {
    if (done()) return true;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if ((i & 63) == 63) {
      if (std::chrono::steady_clock::now() > until) return done();
      std::this_thread::yield();
    }
  }
}

}  // namespace keel
