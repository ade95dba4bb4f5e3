#include "framework/device/replica_scheduler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "framework/core/fiber_locals.h"

#if defined(__SANITIZE_ADDRESS__)
#define KEEL_TEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KEEL_TEST_UNDER_ASAN 1
#endif
#endif
#ifdef KEEL_TEST_UNDER_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace keel {
namespace {

std::string& replica_name() {
  thread_local std::string name = "host";
  return name;
}
const FiberLocal<std::string, replica_name> kNameFollowsTheReplica;

// run_slot on one thread per slot, as the strategy's workers do; the first error any slot rethrew.
std::exception_ptr run(ReplicaScheduler& s, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(s.slots()));
  std::vector<std::thread> threads;
  for (int slot = 0; slot < s.slots(); ++slot) {
    threads.emplace_back([&, slot] {
      try {
        s.run_slot(slot, body);
      } catch (...) {
        errors[static_cast<size_t>(slot)] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (std::exception_ptr& e : errors) {
    if (e) return e;
  }
  return nullptr;
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
  EXPECT_FALSE(run(s, [&](int r) {
    for (int b = 0; b < kBarriers; ++b) {
      compute();
      ++passed[b];
      s.barrier(r);
      if (passed[b].load() != kReplicas) early = true;  // someone left before everyone arrived
    }
  }));
  EXPECT_LE(most.load(), kSlots);  // (both slots need not compute: one may take every replica)
  EXPECT_FALSE(early.load());
}

TEST(ReplicaSchedulerTest, EachReplicaStaysOnTheThreadThatTookItWithItsOwnThreadLocals) {
  constexpr int kReplicas = 6, kSlots = 2, kBarriers = 5;
  ReplicaScheduler s(kReplicas, kSlots);
  std::vector<std::thread::id> thread_of(kReplicas);
  std::atomic<int> wrong_thread{0}, wrong_name{0}, started_fresh{0};
  std::vector<std::string> host_after(kSlots);
  std::vector<std::thread> threads;
  for (int slot = 0; slot < kSlots; ++slot) {
    threads.emplace_back([&, slot] {
      replica_name() = "slot " + std::to_string(slot);
      s.run_slot(slot, [&](int r) {
        if (replica_name() == "host") ++started_fresh;  // a fiber starts at the registered initial value
        replica_name() = "replica " + std::to_string(r);
        thread_of[static_cast<size_t>(r)] = std::this_thread::get_id();
        for (int b = 0; b < kBarriers; ++b) {
          s.barrier(r);
          if (std::this_thread::get_id() != thread_of[static_cast<size_t>(r)]) ++wrong_thread;
          if (replica_name() != "replica " + std::to_string(r)) ++wrong_name;
        }
      });
      host_after[static_cast<size_t>(slot)] = replica_name();
    });
  }
  std::vector<std::thread::id> slot_threads;
  for (std::thread& t : threads) slot_threads.push_back(t.get_id());
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong_thread.load(), 0);
  EXPECT_EQ(wrong_name.load(), 0);
  EXPECT_EQ(started_fresh.load(), kReplicas);
  for (std::thread::id id : thread_of) EXPECT_NE(std::find(slot_threads.begin(), slot_threads.end(), id), slot_threads.end());
  EXPECT_EQ(host_after[0], "slot 0");  // the slot's own value is back once its replicas have run
  EXPECT_EQ(host_after[1], "slot 1");
}

// A slot takes replicas nobody has started whenever its own are parked: one whose thread comes late
// (woken late, or sharing its core with another thread) leaves them to the others instead of making
// every barrier wait for it.
TEST(ReplicaSchedulerTest, ASlotThatStartsLateLeavesTheReplicasToTheOthers) {
  constexpr int kReplicas = 8, kSlots = 2;
  ReplicaScheduler s(kReplicas, kSlots);
  std::vector<int> taken_by(kReplicas, -1);
  std::atomic<int> through{0};
  for (int late = 0; late < kSlots; ++late) {
    std::vector<std::thread> threads;
    for (int slot = 0; slot < kSlots; ++slot) {
      threads.emplace_back([&, slot] {
        if (slot == late) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        s.run_slot(slot, [&](int r) {
          taken_by[static_cast<size_t>(r)] = slot;
          for (int b = 0; b < 3; ++b) s.barrier(r);
          ++through;
        });
      });
    }
    for (std::thread& t : threads) t.join();
    s.reset();
    // Replica 0 stays on slot 0, the caller's thread, whatever comes late.
    EXPECT_EQ(taken_by[0], 0);
    for (int r = 1; r < kReplicas; ++r) EXPECT_EQ(taken_by[static_cast<size_t>(r)], 1 - late) << "replica " << r;
  }
  EXPECT_EQ(through.load(), 2 * kReplicas);
}

TEST(ReplicaSchedulerTest, AbortWakesTheWaitersWithACancellationAndTheSchedulerIsUsableAfterReset) {
  ReplicaScheduler s(4, 2);
  std::atomic<int> cancelled{0};
  EXPECT_FALSE(run(s, [&](int r) {
    if (r == 3) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the others wait at the barrier
      s.abort();
      return;
    }
    try {
      s.barrier(r);
    } catch (const ReplicaCancelled&) {
      ++cancelled;
    }
  }));
  EXPECT_EQ(cancelled.load(), 3);
  s.reset();
  std::atomic<int> through{0};
  EXPECT_FALSE(run(s, [&](int r) {
    s.barrier(r);
    s.barrier(r);
    ++through;
  }));
  EXPECT_EQ(through.load(), 4);
}

TEST(ReplicaSchedulerTest, AnErrorThatEscapesABodyIsRethrownAfterTheSlotsOtherReplicasFinished) {
  ReplicaScheduler s(4, 1);
  std::atomic<int> finished{0};
  std::exception_ptr error = run(s, [&](int r) {
    if (r == 1) throw std::runtime_error("replica 1 failed");
    ++finished;
  });
  ASSERT_TRUE(error);
  EXPECT_THROW(std::rethrow_exception(error), std::runtime_error);
  EXPECT_EQ(finished.load(), 3);
}

TEST(ReplicaSchedulerTest, ManyRunsReuseTheFibersStacks) {
  ReplicaScheduler s(8, 3);
  std::atomic<int> total{0};
  for (int step = 0; step < 200; ++step) {
    EXPECT_FALSE(run(s, [&](int r) {
      s.barrier(r);
      ++total;
    }));
    s.reset();
  }
  EXPECT_EQ(total.load(), 200 * 8);
}

// Instrumented frames poison only their redzones on entry, trusting the stack below them to be
// clean; a fiber's stack may hold the poison of an earlier fiber's frames that never returned, or of
// an earlier mapping at the same address. The run_config fuzzer found string temporaries reported as
// out of scope after ~1,300 runs, before each new fiber's stack was cleaned.
TEST(ReplicaSchedulerTest, EachFiberStartsOnAStackWithCleanShadow) {
#ifndef KEEL_TEST_UNDER_ASAN
  GTEST_SKIP() << "AddressSanitizer's shadow memory exists in the instrumented tree only";
#else
  ReplicaScheduler s(1, 1);
  char* below = nullptr;
  EXPECT_FALSE(run(s, [&](int) {
    char here = 0;
    below = &here - 65536;
    __asan_poison_memory_region(below, 4096);  // as a frame that never returned would leave it
  }));
  s.reset();
  bool clean = false;
  EXPECT_FALSE(run(s, [&](int) { clean = __asan_region_is_poisoned(below, 4096) == nullptr; }));
  EXPECT_TRUE(clean);
#endif
}

}  // namespace
}  // namespace keel
