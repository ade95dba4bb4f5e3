// What the replicas of a process derive from one kernel variable, made once and shared: oneDNN's
// reorders of it into a primitive's layout (conv_onednn.cc), and its values rounded to bfloat16 for
// the im2col convolutions under mixed precision (conv.cc).
//
// Every replica reads one host buffer for a mirrored variable (framework/device/strategy.h), so what
// each would compute from it is the same bits: the first replica to need a derived buffer makes it,
// the others wait for it and read it, until the variable's values change (Storage::id and version
// name them). Each core is still charged its own copy as a workspace, as a core would hold one (one
// host buffer serves them all, as for the variable itself), so plans equal runs either way.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "framework/core/dtype.h"
#include "framework/core/tensor.h"

namespace keel::ops::detail {

// A float32 kernel as the convolutions read it. Where it is a trainable variable and several
// replicas of this process run the step, `storage`/`version` name the values in it (Storage::id and
// version) for sharing; otherwise storage is 0 and each call derives its own.
struct KernelRef {
  const float* data = nullptr;
  uint64_t storage = 0;
  uint64_t version = 0;
};
// The kernel's data() (nullptr when abstract), named for sharing as above where it can be.
KernelRef kernel_ref(const Tensor& kernel);

// Whether kernel_ref names kernels for sharing (on unless switched off; tests compare both), and
// how many derived buffers were shared since the process started: made by one call for others
// (`filled`; `rounded` of them bfloat16 roundings), read by a call that did not make them (`reused`).
void set_kernel_sharing(bool on);
struct KernelSharingCounts {
  int64_t filled = 0;
  int64_t reused = 0;
  int64_t rounded = 0;
};
KernelSharingCounts kernel_sharing_counts();

// A buffer derived from a kernel's values, in host memory.
struct SharedBuffer {
  enum State : int { filling, ready, failed };
  explicit SharedBuffer(size_t size);
  ~SharedBuffer();
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;
  size_t bytes;
  void* data;
  std::atomic<int> state{filling};
};

// The form below without a template, as core/thread_pool.h's run_tasks: fn(fill, data) fills.
using FillFunction = void (*)(void* fill, void* data);
const void* shared_derived(const KernelRef& kernel, const void* what, size_t bytes, FillFunction fn, void* fill,
                           std::shared_ptr<SharedBuffer>& hold);

// The buffer of `bytes` that `fill` derives from `kernel` (storage != 0), one per (values, what):
// `what` names the derivation (a primitive, say). Made by this call with fill(data) or by another
// replica's; held in `hold` while the caller reads it. nullptr when another replica's fill failed:
// the caller derives its own. A throw from fill propagates (waiting replicas then derive their own).
template <class Fill>
const void* shared_derived(const KernelRef& kernel, const void* what, size_t bytes, Fill&& fill,
                           std::shared_ptr<SharedBuffer>& hold) {
  using F = std::remove_cvref_t<Fill>;
  return shared_derived(kernel, what, bytes, [](void* f, void* data) { (*static_cast<const F*>(f))(data); },
                        const_cast<F*>(&fill), hold);
}

// A kernel's values as a computation under `dt` reads them (compute_values, op_util.h): the kernel
// itself in float32, else its values rounded to bfloat16 in a float32 workspace charged to the
// current core. Replicas sharing the variable (kernel_ref) share one rounding: their workspace copy
// is charged but not written.
class KernelValues {
 public:
  KernelValues() = default;
  explicit KernelValues(Tensor values) : tensor_(std::move(values)) {}
  static KernelValues of(const Tensor& kernel, DType dt);
  // The values' tensor (what plans and compute() look at: its data is not the values when shared),
  // the values (nullptr when abstract), and the values as oneDNN's passes take them.
  const Tensor& tensor() const { return tensor_; }
  const float* data() const { return shared_ ? static_cast<const float*>(shared_->data) : tensor_.data(); }
  KernelRef ref() const { return shared_ ? KernelRef{data()} : kernel_ref(tensor_); }

 private:
  Tensor tensor_;
  std::shared_ptr<SharedBuffer> shared_;
};

}  // namespace keel::ops::detail
