#include "framework/core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "framework/core/fiber_locals.h"
#include "framework/core/host_threads.h"
#include "framework/core/spin_wait.h"

namespace keel {
namespace {

thread_local int tls_kernel_threads = 1;
int& kernel_threads_of_thread() { return tls_kernel_threads; }
// A replica's share, whichever host thread runs it.
const FiberLocal<int, kernel_threads_of_thread> kKernelThreadsFollowTheReplica;

// One parallel_for in flight: its caller claims tasks too, and waits for the helpers that attached.
struct Job {
  int64_t tasks = 0;
  detail::TaskFunction fn = nullptr;
  void* body = nullptr;
  std::atomic<int64_t> next{0};
  int wanted = 0;                // helpers that may still attach (guarded by the pool's mutex)
  std::atomic<int> attached{0};  // helpers working on it (changed under the pool's mutex)
  std::mutex error_mu;
  std::exception_ptr error;

  void work() {
    const FlushSubnormals flush;  // whichever thread runs the tasks: one mode, one result
    for (int64_t t = next.fetch_add(1, std::memory_order_relaxed); t < tasks;
         t = next.fetch_add(1, std::memory_order_relaxed)) {
      try {
        fn(body, t);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
      }
    }
  }
};

// Helper threads, started as jobs first ask for them and kept (asleep when idle) until exit.
class Pool {
 public:
  static Pool& instance() {
    static Pool pool;
    return pool;
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  void run(int64_t tasks, int helpers, detail::TaskFunction fn, void* body) {
    Job job;
    job.tasks = tasks;
    job.fn = fn;
    job.body = body;
    bool wake = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (static_cast<int>(threads_.size()) < helpers) threads_.emplace_back([this] { serve(); });
      job.wanted = helpers;
      jobs_.push_back(&job);
      posted_.fetch_add(1, std::memory_order_release);
      wake = sleeping_ > 0;  // helpers still spinning see posted_ change
    }
    if (wake) {
      if (helpers == 1) work_cv_.notify_one(); else work_cv_.notify_all();
    }
    job.work();
    // The helpers that attached finish their last tasks: wait a little before sleeping on it.
    spin_until([&] { return job.attached.load(std::memory_order_acquire) == 0; }, kSpinBeforeSleep);
    std::unique_lock<std::mutex> lock(mu_);
    jobs_.erase(std::find(jobs_.begin(), jobs_.end(), &job));  // every task is claimed: no one else attaches
    done_cv_.wait(lock, [&] { return job.attached.load(std::memory_order_relaxed) == 0; });
    lock.unlock();
    if (job.error) std::rethrow_exception(job.error);
  }

 private:
  Pool() = default;

  Job* wanting_job() {
    for (Job* j : jobs_) {
      if (j->wanted > 0 && j->next.load(std::memory_order_relaxed) < j->tasks) return j;
    }
    return nullptr;
  }

  void serve() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      Job* job = wanting_job();
      if (job == nullptr && !stop_) {
        // A step's next product usually follows within microseconds: look for it a little before
        // sleeping (waking a sleeping thread costs tens of microseconds on a virtual machine).
        const uint64_t seen = posted_.load(std::memory_order_acquire);
        lock.unlock();
        spin_until([&] { return posted_.load(std::memory_order_acquire) != seen; }, kSpinBeforeSleep);
        lock.lock();
        ++sleeping_;
        work_cv_.wait(lock, [&] { return stop_ || (job = wanting_job()) != nullptr; });
        --sleeping_;
      }
      if (stop_) return;
      --job->wanted;
      job->attached.fetch_add(1, std::memory_order_relaxed);
      lock.unlock();
      job->work();
      lock.lock();
      if (job->attached.fetch_sub(1, std::memory_order_release) == 1) done_cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::vector<Job*> jobs_;
  std::vector<std::thread> threads_;
  std::atomic<uint64_t> posted_{0};  // jobs posted so far
  int sleeping_ = 0;                 // helpers waiting on work_cv_ (guarded by mu_)
  bool stop_ = false;
};

}  // namespace

int kernel_threads() { return tls_kernel_threads; }

KernelThreadsScope::KernelThreadsScope(int threads) : saved_(tls_kernel_threads) {
  tls_kernel_threads = std::clamp(threads, 1, kMaxHostThreads);
}

KernelThreadsScope::~KernelThreadsScope() { tls_kernel_threads = saved_; }

namespace detail {
void run_tasks(int64_t tasks, int helpers, TaskFunction fn, void* body) {
  Pool::instance().run(tasks, helpers, fn, body);
}
}  // namespace detail

}  // namespace keel
