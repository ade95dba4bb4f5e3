// Polling a condition for a while before sleeping on it: a hand-off between two busy threads takes
// microseconds this way, where a condition variable's wake-up costs tens of them on a virtual machine.
#pragma once

#include <chrono>
#include <thread>

namespace keel {

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
