// Thread-local state that belongs to a replica, not to the host thread that runs it.
//
// When a device has more replicas than the host has threads, one host thread runs several replicas,
// each on a fiber of its own that switches at barriers (framework/device/replica_scheduler.h). The
// thread-locals that say what is running — the device context, the replica, the gradient tapes, the
// compute dtype, the kernels' thread share — are registered here, and the scheduler swaps every one
// of them with the fiber's own copy whenever it enters or leaves that fiber, so that each replica sees
// its own values, as it would on a thread of its own. Caches (a kernel's scratch buffer) need no
// registration: nothing in them is live across a barrier.
//
//   std::vector<GradientTape*>& tape_stack() { thread_local std::vector<GradientTape*> s; return s; }
//   const FiberLocal<std::vector<GradientTape*>, tape_stack> kTapesFollowTheReplica;
#pragma once

#include <cstddef>
#include <new>
#include <utility>

namespace keel {

namespace detail {

struct FiberLocalType {
  size_t size = 0;
  size_t align = 0;
  void (*construct)(void* at) = nullptr;           // the value a fresh thread starts with
  void (*destroy)(void* at) = nullptr;
  void (*swap_with_thread)(void* saved) = nullptr;  // exchanges the calling thread's value and *saved
};

// During static initialisation only (FiberLocal below): throws std::logic_error once a FiberLocals
// exists, since its layout could no longer change.
void register_fiber_local(const FiberLocalType& type);

}  // namespace detail

// Registers the thread-local that Value() returns; declare one at namespace scope beside it. Its
// value on the registering thread then (a fresh thread's, as static initialisation sets nothing) is
// what every fiber starts with. T must be copyable, and swapping two of them must not throw.
template <class T, T& (*Value)()>
class FiberLocal {
 public:
  FiberLocal() {
    initial();  // captured now, before anything runs
    detail::register_fiber_local({sizeof(T), alignof(T), [](void* at) { new (at) T(initial()); },
                                  [](void* at) { static_cast<T*>(at)->~T(); },
                                  [](void* saved) noexcept {
                                    using std::swap;
                                    swap(Value(), *static_cast<T*>(saved));
                                  }});
  }

 private:
  static const T& initial() {
    static const T value = Value();
    return value;
  }
};

// One fiber's copy of every registered thread-local, each at its initial value until the fiber runs.
class FiberLocals {
 public:
  FiberLocals();
  ~FiberLocals();
  FiberLocals(const FiberLocals&) = delete;
  FiberLocals& operator=(const FiberLocals&) = delete;

  // Exchanges the calling thread's values with these: once on entering the fiber, once on leaving it.
  void swap_with_thread() noexcept;

 private:
  void* storage_ = nullptr;
};

}  // namespace keel
