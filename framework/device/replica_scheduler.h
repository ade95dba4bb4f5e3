// ReplicaScheduler: how the replica threads of one strategy share the host's compute, and meet.
//
// Each replica runs on its own thread, but at most `slots` of them compute at once (no more threads
// than hardware threads busy). A replica waiting at the barrier holds no slot. When the last replica
// arrives, it keeps its slot and the waiters queue for slots in arrival order; each is woken once,
// when a slot is handed to it — not all at once to compete for the slots, which with 8 replicas on 2
// slots cost more than the collectives' work on small steps.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
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
  ReplicaScheduler(const ReplicaScheduler&) = delete;
  ReplicaScheduler& operator=(const ReplicaScheduler&) = delete;

  // Blocks until `replica` holds a slot.
  void acquire(int replica);
  // Gives the slot `replica` holds to the first queued replica, if any.
  void release(int replica);
  // Called holding a slot; returns holding one once every replica has arrived. Throws
  // ReplicaCancelled (still holding a slot) after abort().
  void barrier(int replica);
  // Wakes every replica waiting at the barrier with ReplicaCancelled (one replica failed).
  void abort();
  // Ready for the next run (every replica's thread has finished).
  void reset();

 private:
  void hand_off_locked();
  void wait_for_slot_locked(std::unique_lock<std::mutex>& lock, int replica);

  const int replicas_;
  std::mutex mu_;
  int free_slots_;
  std::deque<int> queue_;              // ready replicas waiting for a slot
  std::vector<char> granted_;          // per replica: a slot was handed to it
  std::vector<std::condition_variable> wake_;  // per replica
  std::vector<int> at_barrier_;        // replicas waiting for the barrier to complete
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
};

}  // namespace keel
