#include "framework/device/replica_scheduler.h"

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <new>

#include <boost/context/fiber.hpp>

#include "framework/core/fiber_locals.h"
#include "framework/core/spin_wait.h"

// AddressSanitizer must be told when the stack changes under it (its fake stacks, its record of the
// stack's bounds), or it reports false errors on a fiber's stack.
#if defined(__SANITIZE_ADDRESS__)
#define KEEL_FIBERS_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KEEL_FIBERS_UNDER_ASAN 1
#endif
#endif
#ifdef KEEL_FIBERS_UNDER_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace keel {
namespace {

namespace ctx = boost::context;

// A thread's default stack: the replicas ran on threads of their own before.
constexpr size_t kStackBytes = size_t{8} << 20;

// One replica's stack for the scheduler's lifetime (every run's fiber starts on it again), with an
// inaccessible page below it so that an overflow faults instead of writing over other memory.
class FiberStack {
 public:
  FiberStack() : page_(static_cast<size_t>(::sysconf(_SC_PAGESIZE))) {
    base_ = ::mmap(nullptr, kStackBytes + page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base_ == MAP_FAILED) throw std::bad_alloc();
    if (::mprotect(base_, page_, PROT_NONE) != 0) {
      ::munmap(base_, kStackBytes + page_);
      throw std::bad_alloc();
    }
  }
  ~FiberStack() { ::munmap(base_, kStackBytes + page_); }
  FiberStack(const FiberStack&) = delete;
  FiberStack& operator=(const FiberStack&) = delete;

  const void* bottom() const { return static_cast<char*>(base_) + page_; }
  // AddressSanitizer: clean shadow for the stack before a fiber starts on it. Instrumented frames
  // poison only their redzones on entry, trusting the stack below them to be clean, as a thread's
  // is; this memory may hold the poison of a previous fiber's frames that never returned (the
  // entry frames), or of an earlier mapping at the same address (munmap leaves shadow as it was).
  void clean_for_a_new_fiber() const {
#ifdef KEEL_FIBERS_UNDER_ASAN
    __asan_unpoison_memory_region(bottom(), kStackBytes);
#endif
  }
  size_t size() const { return kStackBytes; }
  ctx::stack_context context() const {
    ctx::stack_context s;
    s.size = kStackBytes;
    s.sp = static_cast<char*>(base_) + page_ + kStackBytes;
    return s;
  }

 private:
  size_t page_;
  void* base_ = nullptr;
};

// Boost.Context's stack allocator interface over a FiberStack: the fiber ends, the stack stays.
struct ReuseStack {
  const FiberStack* stack;
  ctx::stack_context allocate() { return stack->context(); }
  void deallocate(ctx::stack_context&) noexcept {}
};

// Fake-stack bookkeeping for AddressSanitizer around each switch (no-ops without it).
void before_switch(void** save, const void* bottom, size_t size) {
#ifdef KEEL_FIBERS_UNDER_ASAN
  __sanitizer_start_switch_fiber(save, bottom, size);
#else
  (void)save, (void)bottom, (void)size;
#endif
}

void after_switch(void* saved, const void** old_bottom, size_t* old_size) {
#ifdef KEEL_FIBERS_UNDER_ASAN
  __sanitizer_finish_switch_fiber(saved, old_bottom, old_size);
#else
  (void)saved, (void)old_bottom, (void)old_size;
#endif
}

constexpr uint64_t kRunnable = ~uint64_t{0};

}  // namespace

struct ReplicaScheduler::Fiber {
  FiberStack stack;
  FiberLocals locals;
  ctx::fiber context;      // the replica, while parked (empty once it has returned)
  ctx::fiber slot;         // inside the replica: the slot's loop, to switch back to
  uint64_t waits_for = kRunnable;  // parked at a barrier: the generation it waits to pass
  bool done = true;
  std::exception_ptr error;
  void* fake_stack = nullptr;           // AddressSanitizer: the replica's, while parked
  const void* slot_bottom = nullptr;    // AddressSanitizer: the slot thread's stack
  size_t slot_size = 0;
};

ReplicaScheduler::ReplicaScheduler(int replicas, int slots) : replicas_(replicas), slots_(slots) {
  if (replicas < 1 || slots < 1) throw std::logic_error("ReplicaScheduler: at least one replica and one slot");
  for (int l = 0; l < replicas; ++l) fibers_.push_back(std::make_unique<Fiber>());
}

ReplicaScheduler::~ReplicaScheduler() = default;

// Runs f until it parks at a barrier or returns; the slot's thread-locals are its own again after.
void ReplicaScheduler::enter(Fiber& f) {
  void* slot_fake_stack = nullptr;
  before_switch(&slot_fake_stack, f.stack.bottom(), f.stack.size());
  f.locals.swap_with_thread();
  f.context = std::move(f.context).resume();
  f.locals.swap_with_thread();
  after_switch(slot_fake_stack, nullptr, nullptr);
}

void ReplicaScheduler::start(Fiber& f, const std::function<void(int)>& body, int l) {
  f.done = false;
  f.error = nullptr;
  f.waits_for = kRunnable;
  f.stack.clean_for_a_new_fiber();
  f.context = ctx::fiber(std::allocator_arg, ReuseStack{&f.stack}, [&f, &body, l](ctx::fiber&& from) {
    f.slot = std::move(from);
    after_switch(nullptr, &f.slot_bottom, &f.slot_size);
    try {
      body(l);
    } catch (...) {
      f.error = std::current_exception();
    }
    f.done = true;
    before_switch(nullptr, f.slot_bottom, f.slot_size);  // this fiber's fake stack goes with it
    return std::move(f.slot);
  });
}

void ReplicaScheduler::run_slot(int slot, const std::function<void(int)>& body) {
  std::vector<Fiber*> mine;  // the replicas this slot took, in the order it took them
  size_t running = 0;
  if (slot == 0) {
    // The first replica stays on slot 0, the caller's thread, as before replicas were taken: it
    // leads the process's part of the collectives (MPI calls among them).
    Fiber& f = *fibers_[0];
    start(f, body, 0);
    mine.push_back(&f);
    ++running;
  }
  for (;;) {
    bool entered = false;
    uint64_t parked_on = kRunnable;
    for (Fiber* f : mine) {
      if (f->done) continue;
      if (f->waits_for != kRunnable && f->waits_for == generation_.load(std::memory_order_acquire) &&
          !aborted_.load(std::memory_order_acquire)) {
        parked_on = f->waits_for;
        continue;
      }
      f->waits_for = kRunnable;
      enter(*f);
      entered = true;
      if (f->done) --running;
    }
    if (entered) continue;
    // Every replica of this slot is parked or done: take one nobody has started, if any.
    const int l = unstarted_.fetch_add(1, std::memory_order_relaxed);
    if (l < replicas_) {
      Fiber& f = *fibers_[static_cast<size_t>(l)];
      start(f, body, l);
      mine.push_back(&f);
      ++running;
      continue;  // the loop above enters it
    }
    if (running == 0) break;
    wait_for_generation_after(parked_on);
  }
  for (Fiber* f : mine) {
    if (f->error) std::rethrow_exception(f->error);
  }
}

void ReplicaScheduler::barrier(int replica) {
  Fiber& f = *fibers_[static_cast<size_t>(replica)];
  if (aborted_.load(std::memory_order_acquire)) throw ReplicaCancelled();
  const uint64_t generation = generation_.load(std::memory_order_acquire);
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == replicas_) {
    // The last arrival: nobody else can arrive until the generation moves on.
    arrived_.store(0, std::memory_order_relaxed);
    generation_.store(generation + 1, std::memory_order_release);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (sleepers_ == 0) return;
    }
    wake_.notify_all();
    return;
  }
  f.waits_for = generation;
  before_switch(&f.fake_stack, f.slot_bottom, f.slot_size);
  f.slot = std::move(f.slot).resume();  // park: the slot runs its other replicas
  after_switch(f.fake_stack, &f.slot_bottom, &f.slot_size);
  if (generation_.load(std::memory_order_acquire) == generation) throw ReplicaCancelled();  // woken by abort()
}

// Every replica of this slot is parked at the barrier `generation`: poll (the others are usually
// microseconds away), then sleep until the barrier completes or the run is aborted. The poll yields
// the core every 64 rounds (spin_until), so the input pipeline's thread still gets it: polling
// kSpinBeforeSleep so measured faster than a 10 us spin without yields (bench/mlp_throughput
// --device v3-8 --batch-per-core 16 on 2 cores: 7 interleaved pairs, 8% on steady epochs; 10 pairs,
// 17% on best epochs, every pair faster); a 50 us spin without yields had been 8% slower than 10 us,
// the spinning thread taking the core from the pipeline's.
void ReplicaScheduler::wait_for_generation_after(uint64_t generation) {
  auto passed = [&] {
    return generation_.load(std::memory_order_acquire) != generation || aborted_.load(std::memory_order_acquire);
  };
  if (keel::spin_until(passed, kSpinBeforeSleep)) return;
  std::unique_lock<std::mutex> lock(mu_);
  ++sleepers_;
  wake_.wait(lock, passed);
  --sleepers_;
}

void ReplicaScheduler::abort() {
  aborted_.store(true, std::memory_order_release);
  { std::lock_guard<std::mutex> lock(mu_); }
  wake_.notify_all();
}

void ReplicaScheduler::reset() {
  aborted_.store(false);
  arrived_.store(0);
  unstarted_.store(1);
}

}  // namespace keel
