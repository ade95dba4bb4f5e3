// SIGINT and SIGTERM during `keel train` and `keel resume`, received by one thread of their own.
//
// Why not a plain handler: a signal handled on a thread that is computing runs its handler on that
// thread's stack, below the stack pointer, and oneDNN 2.6's JIT sgemm (Debian 12's libdnnl2, AVX2 and
// AVX-512 kernels) keeps live data there: the handler's frame overwrote it, and the process went on to
// corrupt its heap ("corrupted size vs. prev_size", "free(): invalid next size"), in about one run in
// ten that a SIGTERM reached mid-step. So the signals are blocked in every thread the command starts
// and taken by a watcher thread with sigtimedwait, which computes nothing.
#pragma once

#include <signal.h>

#include <atomic>
#include <thread>

namespace keel::cli {

// While it lives: SIGINT and SIGTERM are blocked in the constructing thread and so in every thread
// it starts from then on, and a watcher thread stores the first one's number in `*received`; a
// second signal ends the process the default way (as with SIG_DFL: 130 or 143 to the shell).
// Threads started before it (Open MPI's) still take them, through a handler that does the same.
// Construct it first of all, before any other thread starts; destruction restores the signal mask
// and handlers as they were.
class SignalWatch {
 public:
  explicit SignalWatch(std::atomic<int>* received);
  ~SignalWatch();
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;

 private:
  void watch();

  std::atomic<int>* received_;
  sigset_t signals_{};
  sigset_t old_mask_{};
  struct sigaction old_int_{}, old_term_{};
  std::atomic<bool> stop_{false};
  std::thread watcher_;  // last: starts once the members it uses exist
};

}  // namespace keel::cli
