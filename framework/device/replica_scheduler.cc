#include "framework/device/replica_scheduler.h"

#include <algorithm>

namespace keel {

ReplicaScheduler::ReplicaScheduler(int replicas, int slots)
    : replicas_(replicas), free_slots_(slots), granted_(static_cast<size_t>(replicas), 0),
      wake_(static_cast<size_t>(replicas)) {
  if (replicas < 1 || slots < 1) throw std::logic_error("ReplicaScheduler: at least one replica and one slot");
}

void ReplicaScheduler::hand_off_locked() {
  if (queue_.empty()) {
    ++free_slots_;
    return;
  }
  const int next = queue_.front();
  queue_.pop_front();
  granted_[static_cast<size_t>(next)] = 1;
  wake_[static_cast<size_t>(next)].notify_one();
}

void ReplicaScheduler::wait_for_slot_locked(std::unique_lock<std::mutex>& lock, int replica) {
  if (free_slots_ > 0 && queue_.empty()) {
    --free_slots_;
    return;
  }
  queue_.push_back(replica);
  wake_[static_cast<size_t>(replica)].wait(lock, [&] { return granted_[static_cast<size_t>(replica)] != 0; });
  granted_[static_cast<size_t>(replica)] = 0;
}

void ReplicaScheduler::acquire(int replica) {
  std::unique_lock<std::mutex> lock(mu_);
  wait_for_slot_locked(lock, replica);
}

void ReplicaScheduler::release(int) {
  std::lock_guard<std::mutex> lock(mu_);
  hand_off_locked();
}

void ReplicaScheduler::barrier(int replica) {
  std::unique_lock<std::mutex> lock(mu_);
  if (aborted_) throw ReplicaCancelled();
  if (++arrived_ == replicas_) {
    // The last arrival keeps its slot; the others queue for slots in the order they arrived.
    arrived_ = 0;
    ++generation_;
    for (int waiter : at_barrier_) queue_.push_back(waiter);
    at_barrier_.clear();
    while (free_slots_ > 0 && !queue_.empty()) {
      --free_slots_;
      const int next = queue_.front();
      queue_.pop_front();
      granted_[static_cast<size_t>(next)] = 1;
      wake_[static_cast<size_t>(next)].notify_one();
    }
    return;
  }
  const uint64_t generation = generation_;
  at_barrier_.push_back(replica);
  hand_off_locked();  // give the slot away while waiting
  wake_[static_cast<size_t>(replica)].wait(
      lock, [&] { return granted_[static_cast<size_t>(replica)] != 0 || (aborted_ && generation_ == generation); });
  if (granted_[static_cast<size_t>(replica)] != 0) {
    granted_[static_cast<size_t>(replica)] = 0;
    return;  // the barrier completed and a slot was handed over
  }
  // Aborted before the barrier completed: leave it, take a slot back, report the cancellation.
  at_barrier_.erase(std::find(at_barrier_.begin(), at_barrier_.end(), replica));
  --arrived_;
  wait_for_slot_locked(lock, replica);
  throw ReplicaCancelled();
}

void ReplicaScheduler::abort() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = true;
  for (std::condition_variable& cv : wake_) cv.notify_all();
}

void ReplicaScheduler::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = false;
  arrived_ = 0;
  at_barrier_.clear();
}

}  // namespace keel
