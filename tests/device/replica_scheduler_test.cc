#include "framework/device/replica_scheduler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace keel {
namespace {

// Runs body(replica) on one thread per replica, each holding a slot while it runs.
template <class F>
void on_threads(ReplicaScheduler& s, int replicas, F body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < replicas; ++r) {
    threads.emplace_back([&, r] {
      s.acquire(r);
      try {
        body(r);
      } catch (const ReplicaCancelled&) {
      }
      s.release(r);
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(ReplicaSchedulerTest, NoMoreReplicasComputeThanSlotsAndEveryBarrierWaitsForAll) {
  constexpr int kReplicas = 8, kSlots = 2, kBarriers = 20;
  ReplicaScheduler s(kReplicas, kSlots);
  std::atomic<int> running{0}, most{0};
  std::atomic<int> passed[kBarriers] = {};
  std::atomic<bool> early{false};
  auto compute = [&] {
    const int now = ++running;
    int seen = most.load();
    while (now > seen && !most.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    --running;
  };
  on_threads(s, kReplicas, [&](int r) {
    for (int b = 0; b < kBarriers; ++b) {
      compute();
      ++passed[b];
      s.barrier(r);
      if (passed[b].load() != kReplicas) early = true;  // someone left before everyone arrived
    }
  });
  EXPECT_LE(most.load(), kSlots);
  EXPECT_EQ(most.load(), kSlots) << "both slots were used";
  EXPECT_FALSE(early.load());
}

TEST(ReplicaSchedulerTest, AbortWakesTheWaitersWithACancellation) {
  ReplicaScheduler s(4, 2);
  std::atomic<int> cancelled{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      s.acquire(r);
      if (r == 3) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the others wait at the barrier
        s.abort();
      } else {
        try {
          s.barrier(r);
        } catch (const ReplicaCancelled&) {
          ++cancelled;
        }
      }
      s.release(r);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(cancelled.load(), 3);
  s.reset();
  // Usable again: a full barrier with every replica.
  std::atomic<int> through{0};
  on_threads(s, 4, [&](int r) {
    s.barrier(r);
    ++through;
  });
  EXPECT_EQ(through.load(), 4);
}

}  // namespace
}  // namespace keel
