// ReplicaScheduler: how the replicas of one strategy share the host's threads, and meet.
//
// `slots` host threads (no more than the hardware has) run `replicas` replicas, each replica on a
// fiber of its own (Boost.Context), with its own stack and its own copy of the thread-locals that
// describe it (framework/core/fiber_locals.h). Slot 0 (the caller's thread) runs replica 0, which
// leads the process's part of the collectives; a slot takes a replica nobody has started whenever all
// of its own are parked at a barrier, so a slot whose thread starts late, or shares its core with
// the input pipeline's, takes fewer (with a fixed share, replica l on slot l mod slots, every barrier
// waited for the slowest slot). A replica that reaches a barrier parks its fiber and the slot's
// thread runs its next replica, with no system call; only when every replica of a slot is parked and
// none is left to take does the thread wait for the others: briefly spinning, then sleeping on a
// condition variable. With 8 replicas on 2 threads a barrier so costs one meeting of two threads,
// where a thread per replica cost eight sleeps and wake-ups, which dominated small steps.
//
// A replica's fiber runs on one thread only, so its thread-locals' addresses stay valid across a
// barrier. A replica must not hold a lock across a barrier (another replica of its thread could then
// block on it), nor wait for another replica except at barriers.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace keel {

// Thrown in replicas woken from a barrier because another replica failed.
struct ReplicaCancelled : std::runtime_error {
  ReplicaCancelled() : std::runtime_error("replica cancelled because another replica failed") {}
};

class ReplicaScheduler {
 public:
  ReplicaScheduler(int replicas, int slots);
  ~ReplicaScheduler();
  ReplicaScheduler(const ReplicaScheduler&) = delete;
  ReplicaScheduler& operator=(const ReplicaScheduler&) = delete;

  int replicas() const { return replicas_; }
  int slots() const { return slots_; }

  // On the thread of `slot` (one thread per slot, all at once): body(l) for each replica l the slot
  // takes, each on its fiber, switching between them at barriers; returns once they have returned
  // and every replica has been taken. Which slot runs which replica changes no result. An exception
  // that escapes a body is rethrown here after the slot's other replicas have finished.
  void run_slot(int slot, const std::function<void(int)>& body);
  // Called by replica l inside run_slot: returns once every replica has called it. Throws
  // ReplicaCancelled after abort() if the barrier had not completed.
  void barrier(int replica);
  // Replicas waiting at a barrier, or reaching one, throw ReplicaCancelled (another replica failed).
  void abort();
  // Ready for the next run (every run_slot has returned).
  void reset();

 private:
  struct Fiber;
  void start(Fiber& f, const std::function<void(int)>& body, int l);
  void enter(Fiber& f);
  void wait_for_generation_after(uint64_t generation);

  const int replicas_;
  const int slots_;
  std::vector<std::unique_ptr<Fiber>> fibers_;  // per replica
  std::atomic<int> unstarted_{1};        // the next replica no slot has taken (slot 0 runs replica 0)
  std::atomic<int> arrived_{0};
  std::atomic<uint64_t> generation_{0};  // barriers completed
  std::atomic<bool> aborted_{false};
  std::mutex mu_;                        // for sleeping slots only
  std::condition_variable wake_;
  int sleepers_ = 0;                     // guarded by mu_
};

}  // namespace keel
