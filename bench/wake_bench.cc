// What waking a sleeping thread costs the thread that wakes it: the hand-off of an input pipeline's
// prefetch buffer (framework/data/dataset_prefetch.cc), one element per step.
//
//   build/bench/wake_bench [rounds]
//
// A producer keeps a queue of two elements full and sleeps on a condition variable; the consumer
// takes one element every 300 us (a small training step, during which the producer's core goes
// idle) and times its notify_one, which must wake the producer. Prints the mean over the rounds,
// and the same notify with nobody asleep (no system call) for comparison.
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;

void busy_for(std::chrono::microseconds d) {
  const Clock::time_point until = Clock::now() + d;
  while (Clock::now() < until) {
  }
}

// Mean microseconds of the consumer's notify_one after each pop, with a producer asleep or not.
double notify_cost(int rounds, bool producer) {
  std::mutex mu;
  std::condition_variable cv;
  int queued = 2;
  bool stop = false;
  std::thread t;
  if (producer) {
    t = std::thread([&] {
      for (;;) {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stop || queued < 2; });
        if (stop) return;
        ++queued;
        lock.unlock();
        cv.notify_all();  // the consumer, if it found the queue empty (not timed)
      }
    });
  }
  double total_us = 0;
  for (int i = 0; i < rounds; ++i) {
    busy_for(std::chrono::microseconds(300));
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return queued > 0 || !producer; });
      if (producer) --queued;
    }
    const Clock::time_point start = Clock::now();
    cv.notify_one();
    total_us += std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
  }
  cv.notify_all();
  if (t.joinable()) t.join();
  return total_us / rounds;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 2000;
  if (rounds < 1) {
    std::fprintf(stderr, "wake_bench: rounds must be a positive whole number\n");
    return 2;
  }
  const double asleep = notify_cost(rounds, true);
  const double nobody = notify_cost(rounds, false);
  std::printf("{\"rounds\": %d, \"notify_waking_a_sleeper_us\": %.2f, \"notify_with_nobody_waiting_us\": %.3f}\n", rounds,
              asleep, nobody);
  return 0;
}
