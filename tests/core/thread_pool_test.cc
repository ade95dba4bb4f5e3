// The compute thread pool (framework/core/thread_pool.h): every task runs exactly once whatever the
// share, helpers really run beside the caller, jobs meet helpers polling or asleep, several callers
// share the pool at once, the first
// error comes back after the others ran; and the thread count a user sets (KEEL_NUM_THREADS,
// set_host_threads) with its checks.
#include "framework/core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "framework/core/float_environment.h"
#include "framework/core/host_threads.h"

namespace keel {
namespace {

TEST(ThreadPoolTest, AThreadsShareIsOneUnlessAScopeSetsIt) {
  EXPECT_EQ(kernel_threads(), 1);
  {
    const KernelThreadsScope four(4);
    EXPECT_EQ(kernel_threads(), 4);
    {
      const KernelThreadsScope none(0);
      EXPECT_EQ(kernel_threads(), 1);
    }
    EXPECT_EQ(kernel_threads(), 4);
    std::thread([] { EXPECT_EQ(kernel_threads(), 1); }).join();  // per thread
  }
  EXPECT_EQ(kernel_threads(), 1);
}

TEST(ThreadPoolTest, EveryTaskRunsExactlyOnceWhateverTheShare) {
  for (int share : {1, 2, 3, 8}) {
    const KernelThreadsScope scope(share);
    for (int64_t tasks : {1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(tasks));
      parallel_for(tasks, [&](int64_t t) { runs[static_cast<size_t>(t)]++; });
      for (int64_t t = 0; t < tasks; ++t) ASSERT_EQ(runs[static_cast<size_t>(t)].load(), 1) << share << " " << tasks << " " << t;
    }
  }
  parallel_for(0, [](int64_t) { FAIL() << "no task to run"; });
}

// Two tasks that each wait for the other: they finish only if two threads run them at once.
TEST(ThreadPoolTest, HelpersRunBesideTheCaller) {
  const KernelThreadsScope two(2);
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  std::set<std::thread::id> ids;
  parallel_for(2, [&](int64_t) {
    std::unique_lock<std::mutex> lock(mu);
    ids.insert(std::this_thread::get_id());
    ++arrived;
    cv.notify_all();
    EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return arrived == 2; }));
  });
  EXPECT_EQ(ids.size(), 2u);
}

TEST(ThreadPoolTest, MaxThreadsKeepsSmallWorkOnTheCaller) {
  const KernelThreadsScope four(4);
  std::set<std::thread::id> ids;
  std::mutex mu;
  parallel_for(
      64,
      [&](int64_t) {
        std::lock_guard<std::mutex> lock(mu);
        ids.insert(std::this_thread::get_id());
      },
      /*max_threads=*/1);
  EXPECT_EQ(ids, std::set<std::thread::id>{std::this_thread::get_id()});
  EXPECT_EQ(threads_worth(10, 100), 1);
  EXPECT_EQ(threads_worth(1000, 100), 10);
}

// Replicas call parallel_for at the same time, each with its share: every caller's tasks run once.
TEST(ThreadPoolTest, SeveralCallersShareThePool) {
  constexpr int kCallers = 4;
  constexpr int64_t kTasks = 500;
  std::vector<std::vector<std::atomic<int>>> runs(kCallers);
  for (auto& r : runs) r = std::vector<std::atomic<int>>(kTasks);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      const KernelThreadsScope share(3);
      for (int round = 0; round < 20; ++round) {
        parallel_for(kTasks, [&](int64_t t) { runs[static_cast<size_t>(c)][static_cast<size_t>(t)]++; });
      }
    });
  }
  for (std::thread& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c) {
    for (int64_t t = 0; t < kTasks; ++t) ASSERT_EQ(runs[static_cast<size_t>(c)][static_cast<size_t>(t)].load(), 20);
  }
}

// Jobs that follow each other closely meet helpers still polling for work (100 us); jobs after an
// idle gap meet them asleep: either way every task runs once, and a job after the gap wakes them.
TEST(ThreadPoolTest, JobsMeetHelpersPollingOrAsleep) {
  const KernelThreadsScope three(3);
  constexpr int64_t kTasks = 16;
  for (int round = 0; round < 300; ++round) {
    if (round % 50 == 49) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // helpers sleep
    std::vector<std::atomic<int>> runs(kTasks);
    parallel_for(kTasks, [&](int64_t t) { runs[static_cast<size_t>(t)]++; });
    for (int64_t t = 0; t < kTasks; ++t) ASSERT_EQ(runs[static_cast<size_t>(t)].load(), 1) << "round " << round;
  }
  // After a gap, a job whose tasks wait for each other finishes: a sleeping helper was woken for it.
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  std::atomic<int> arrived{0};
  std::atomic<bool> waited_in_vain{false};  // a task gave up: no second thread ran the other at once
  parallel_for(2, [&](int64_t) {
    arrived++;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (arrived.load() < 2) {
      if (std::chrono::steady_clock::now() > give_up) {
        waited_in_vain = true;
        break;
      }
      std::this_thread::yield();
    }
  });
  EXPECT_FALSE(waited_in_vain.load());
}

TEST(ThreadPoolTest, ATaskErrorComesBackAfterTheOtherTasksRan) {
  const KernelThreadsScope three(3);
  std::atomic<int> ran{0};
  EXPECT_THROW(parallel_for(100,
                            [&](int64_t t) {
                              ran++;
                              if (t == 17) throw std::runtime_error("task 17");
                            }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 100);
  // The pool is still usable.
  std::atomic<int> again{0};
  parallel_for(10, [&](int64_t) { again++; });
  EXPECT_EQ(again.load(), 10);
}

// Sets KEEL_NUM_THREADS for one test, restoring what was there.
class NumThreadsEnv {
 public:
  explicit NumThreadsEnv(const char* value) {
    if (const char* old = std::getenv("KEEL_NUM_THREADS")) saved_ = old, had_ = true;
    if (value != nullptr) setenv("KEEL_NUM_THREADS", value, 1); else unsetenv("KEEL_NUM_THREADS");
  }
  ~NumThreadsEnv() {
    if (had_) setenv("KEEL_NUM_THREADS", saved_.c_str(), 1); else unsetenv("KEEL_NUM_THREADS");
  }

 private:
  std::string saved_;
  bool had_ = false;
};

TEST(HostThreadsOverrideTest, KeelNumThreadsAndSetHostThreadsOverrideTheMachine) {
  const NumThreadsEnv env("3");
  EXPECT_EQ(host_threads(), 3);
  set_host_threads(5);
  EXPECT_EQ(host_threads(), 5);
  set_host_threads(0);
  EXPECT_EQ(host_threads(), 3);
}

TEST(HostThreadsOverrideTest, BadCountsAreRefusedWithTheirName) {
  for (const char* bad : {"0", "-2", "abc", "4097", "99999999999999999999", "2x"}) {
    const NumThreadsEnv env(bad);
    try {
      host_threads();
      ADD_FAILURE() << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("KEEL_NUM_THREADS"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(set_host_threads(-1), std::invalid_argument);
  EXPECT_THROW(set_host_threads(kMaxHostThreads + 1), std::invalid_argument);
  EXPECT_EQ(parse_thread_count("16", "--threads"), 16);
  EXPECT_THROW(parse_thread_count("", "--threads"), std::invalid_argument);
}

// Every task computes with subnormals flushed (framework/core/float_environment.h), the caller's
// share too although its thread never asked, and on one thread as on several: however the tasks
// fall on threads, one result.
TEST(ThreadPoolTest, TasksFlushSubnormalsOnEveryThreadAndTheCallersModeIsPutBack) {
  if (!FlushSubnormals::available()) GTEST_SKIP() << "this CPU has no flush-to-zero mode";
  ASSERT_FALSE(FlushSubnormals::active());
  for (int threads : {1, 2}) {
    const KernelThreadsScope share(threads);
    for (int64_t tasks : {1, 64}) {
      std::atomic<int> flushed{0};
      parallel_for(tasks, [&](int64_t) {
        if (FlushSubnormals::active()) ++flushed;
      });
      EXPECT_EQ(flushed.load(), tasks) << threads << " threads, " << tasks << " tasks";
      EXPECT_FALSE(FlushSubnormals::active());
    }
  }
}

}  // namespace
}  // namespace keel
