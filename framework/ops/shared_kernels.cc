#include "framework/ops/shared_kernels.h"

#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <utility>

#include "framework/core/host_allocator.h"
#include "framework/device/context.h"
#include "framework/device/replica_context.h"
#include "framework/device/strategy.h"
#include "framework/ops/op_util.h"

namespace keel::ops::detail {
namespace {

// The shared buffers by (variable buffer, kernel address, derivation), each for one version of the
// values. Held to kMaxBytes: past it the cache starts over (a buffer in use stays alive with its user).
class SharedBuffers {
 public:
  // The buffer for (kernel, what), and whether the caller must fill it (then set its state). One
  // another replica is filling comes back too, to wait for.
  std::pair<std::shared_ptr<SharedBuffer>, bool> acquire(const KernelRef& kernel, const void* what, size_t bytes) {
    constexpr size_t kMaxBytes = size_t{512} << 20;
    const Key key{kernel.storage, kernel.data, what};
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it != entries_.end() && it->second.version == kernel.version &&
        it->second.buffer->state.load(std::memory_order_acquire) != SharedBuffer::failed) {
      return {it->second.buffer, false};
    }
    auto buffer = std::make_shared<SharedBuffer>(bytes);  // first: a throw changes nothing
    if (it != entries_.end()) {
      bytes_ -= it->second.buffer->bytes;
      entries_.erase(it);
    }
    if (bytes_ + buffer->bytes > kMaxBytes) {
      entries_.clear();
      bytes_ = 0;
    }
    entries_[key] = Entry{kernel.version, buffer};
    bytes_ += buffer->bytes;
    return {buffer, true};
  }

 private:
  using Key = std::tuple<uint64_t, const float*, const void*>;
  struct Entry {
    uint64_t version = 0;
    std::shared_ptr<SharedBuffer> buffer;
  };
  std::mutex mutex_;
  std::map<Key, Entry> entries_;
  size_t bytes_ = 0;
};

std::atomic<bool> sharing_on{true};
std::atomic<int64_t> shared_fills{0}, shared_reads{0}, shared_roundings{0};

SharedBuffers& shared_buffers() {
  static SharedBuffers* buffers = new SharedBuffers();  // never destroyed: passes may run during exit
  return *buffers;
}

// Waits for another replica's fill; whether it succeeded. The filler runs on another thread and
// does not yield until it is done (a fiber of this thread would have finished it before this one
// ran), so this spins a little, then gives the processor up between looks.
bool wait_until_filled(const SharedBuffer& buffer) {
  for (int looks = 0;; ++looks) {
    const int state = buffer.state.load(std::memory_order_acquire);
    if (state != SharedBuffer::filling) return state == SharedBuffer::ready;
    if (looks >= 256) std::this_thread::yield();
  }
}

// Names the bfloat16 rounding among the derivations.
constexpr char kRounding = 0;

}  // namespace

SharedBuffer::SharedBuffer(size_t size) : bytes(size), data(host_allocate(size)) {}
SharedBuffer::~SharedBuffer() { host_free(data, bytes); }

KernelRef kernel_ref(const Tensor& kernel) {
  KernelRef ref{kernel.data()};
  const ReplicaContext* ctx = current_replica_context();
  if (ref.data != nullptr && kernel.is_trainable_variable() && ctx != nullptr && ctx->strategy().local_replicas() > 1 &&
      sharing_on.load(std::memory_order_relaxed)) {
    ref.storage = kernel.storage().id();
    ref.version = kernel.storage().version();
  }
  return ref;
}

void set_kernel_sharing(bool on) { sharing_on.store(on); }
KernelSharingCounts kernel_sharing_counts() { return {shared_fills.load(), shared_reads.load(), shared_roundings.load()}; }

const void* shared_derived(const KernelRef& kernel, const void* what, size_t bytes, FillFunction fn, void* fill,
                           std::shared_ptr<SharedBuffer>& hold) {
  auto [buffer, filler] = shared_buffers().acquire(kernel, what, bytes);
  if (filler) {
    try {
      fn(fill, buffer->data);
    } catch (...) {
      buffer->state.store(SharedBuffer::failed, std::memory_order_release);  // waiters derive their own
      throw;
    }
    buffer->state.store(SharedBuffer::ready, std::memory_order_release);
    shared_fills.fetch_add(1, std::memory_order_relaxed);
    if (what == &kRounding) shared_roundings.fetch_add(1, std::memory_order_relaxed);
  } else if (wait_until_filled(*buffer)) {
    shared_reads.fetch_add(1, std::memory_order_relaxed);
  } else {
    return nullptr;
  }
  hold = std::move(buffer);
  return hold->data;
}

KernelValues KernelValues::of(const Tensor& kernel, DType dt) {
  const bool rounds = dt == DType::bfloat16 && kernel.dtype() == DType::float32;
  const KernelRef ref = rounds ? kernel_ref(kernel) : KernelRef{};
  if (ref.storage == 0 || kernel.size() == 0) return KernelValues(compute_values(kernel, dt));
  KernelValues values;
  {  // compute_values' workspace, charged the same, written only if the rounding cannot be shared
    CategoryScope workspace(Category::workspace);
    values.tensor_ = Tensor::empty(kernel.shape());
  }
  const int64_t n = kernel.size();
  const auto round = [&](void* out) { round_bfloat16(ref.data, static_cast<float*>(out), n); };
  if (shared_derived(ref, &kRounding, static_cast<size_t>(n) * sizeof(float), round, values.shared_) == nullptr) {
    round(values.tensor_.data());
  }
  return values;
}

}  // namespace keel::ops::detail
