// SignalWatch (tools/cli/signal_watch.h): SIGINT and SIGTERM reach its watcher thread, never a
// thread that computes.
#include "tools/cli/signal_watch.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "framework/ops/sgemm.h"

namespace keel::cli {
namespace {

bool blocked_here(int sig) {
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  return sigismember(&mask, sig) == 1;
}

// Waits up to 5 s for the watch to take a signal; returns it and forgets it (0 if none came).
int take(std::atomic<int>& received) {
  for (int i = 0; i < 5000 && received.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return received.exchange(0);
}

TEST(SignalWatch, TheSignalsReachTheWatchAndNoThreadStartedUnderIt) {
  std::atomic<int> received{0};
  {
    const SignalWatch watch(&received);
    bool blocked_in_a_new_thread = false;
    std::thread([&] { blocked_in_a_new_thread = blocked_here(SIGTERM) && blocked_here(SIGINT); }).join();
    EXPECT_TRUE(blocked_in_a_new_thread);
    ::kill(::getpid(), SIGTERM);
    EXPECT_EQ(take(received), SIGTERM);
    ::kill(::getpid(), SIGINT);
    EXPECT_EQ(take(received), SIGINT);
  }
  EXPECT_FALSE(blocked_here(SIGTERM)) << "the mask is restored when the watch ends";
}

TEST(SignalWatch, ASecondSignalEndsTheProcessTheDefaultWay) {
  EXPECT_EXIT(
      {
        std::atomic<int> received{0};
        const SignalWatch watch(&received);
        ::kill(::getpid(), SIGTERM);
        take(received);
        received.store(SIGTERM);  // the first one, not yet acted on
        ::kill(::getpid(), SIGTERM);
        std::this_thread::sleep_for(std::chrono::seconds(5));
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGTERM), "");
}

// The reason for the watch: a handler run on a thread inside oneDNN's JIT sgemm overwrote data that
// sgemm keeps below the stack pointer, and the heap was corrupted within a few hundred signals (glibc
// then aborts; this test did, with the signals unblocked). Under the watch 2000 products run through
// signals sent as fast as the watch takes them, with the same bits.
TEST(SignalWatch, SignalsDuringOneDnnProductsChangeNothing) {
  std::atomic<int> received{0};
  const SignalWatch watch(&received);
  const int64_t m = 128, k = 784, n = 256;
  std::vector<float> a(m * k), b(k * n), first(m * n), c(m * n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 13) * 0.25f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 7) * 0.5f;
  ops::detail::sgemm({a.data(), k}, {b.data(), n}, first.data(), n, m, n, k, false);
  std::atomic<bool> done{false};
  std::atomic<int> sent{0};
  std::thread sender([&] {
    while (!done.load()) {
      ::kill(::getpid(), SIGINT);
      ++sent;
      take(received);
    }
  });
  int differing = 0;
  for (int r = 0; r < 2000; ++r) {
    ops::detail::sgemm({a.data(), k}, {b.data(), n}, c.data(), n, m, n, k, false);
    differing += c != first;
    std::vector<float> scratch(1000 + r % 100);  // the heap, in use meanwhile
  }
  done.store(true);
  sender.join();
  EXPECT_EQ(differing, 0);
  EXPECT_GT(sent.load(), 100);
}

}  // namespace
}  // namespace keel::cli
