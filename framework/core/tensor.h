// Tensor: a float32 (or bfloat16) array with a shape, whose storage is charged to the ledger of the
// core it lives on, at its element size.
//
// Copies of a Tensor share storage (like a TF handle); `id()` identifies the value for the gradient
// tape. A tensor is *abstract* when it has a shape and ledger charges but no storage: the planner
// runs the real code path on abstract tensors, and kernels skip the arithmetic.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "framework/core/dtype.h"
#include "framework/core/shape.h"
#include "framework/core/storage_charging.h"

namespace keel {


using MatrixRM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<MatrixRM, Eigen::Unaligned>;
using ConstMatrixMap = Eigen::Map<const MatrixRM, Eigen::Unaligned>;
using ArrayMap = Eigen::Map<Eigen::ArrayXf, Eigen::Unaligned>;
using ConstArrayMap = Eigen::Map<const Eigen::ArrayXf, Eigen::Unaligned>;

// A buffer and the ledger charges it holds; both are released together.
class Storage {
 public:
  using Charge = StorageCharge;
  // Charges according to this thread's DeviceContext (or the explicit category/owner), then allocates
  // (core/storage_charging.h).
  static std::shared_ptr<Storage> allocate(int64_t elements, const Shape& shape, Category category,
                                           const std::string& owner, DType dtype = DType::float32);
  // Host memory whatever the thread's context: never charged, never abstract.
  static std::shared_ptr<Storage> allocate_host(int64_t elements, DType dtype = DType::float32);
  // Charged as allocate() charges, but holding `source`'s memory from byte `offset` on instead of
  // memory of its own (`source` kept alive as long as this buffer is). For a host buffer nobody else
  // can read any more, handed to a core (or its rows to several) without a copy
  // (Tensor::moved_to_context, Tensor::rows_moved_to_context); `source` must be concrete and hold
  // `elements` from `offset` on.
  static std::shared_ptr<Storage> adopt(std::shared_ptr<Storage> source, int64_t offset, int64_t elements,
                                        const Shape& shape, Category category, const std::string& owner, DType dtype);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // A mutable access counts as a change of the contents (version() moves), whether or not it writes.
  void* data() {
    version_.fetch_add(1, std::memory_order_relaxed);
    return data_;
  }
  const void* data() const { return data_; }
  // Which contents this buffer holds: id() is unique in the process (never reused, unlike an address)
  // and version() moves on every mutable access, so something derived from the values (oneDNN's
  // reordered convolution kernel of a variable, shared by the replicas) stays valid while both match.
  // Code that writes through a pointer held from an earlier data() must not let a reader in between.
  uint64_t id() const { return id_; }
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  int64_t elements() const { return elements_; }
  bool abstract() const { return data_ == nullptr && elements_ > 0; }
  // Re-charges this buffer to another category/owner on every core it is charged to.
  void retag(Category category, const std::string& owner);
  // Moves the buffer to `memory` (bytes() long, owned by the caller, which must move it back before
  // freeing it), copying the contents there unless `copy` is false (another process wrote them), or,
  // with nullptr, back to memory of its own with the contents. The charges stay; version() moves.
  // The processes of one machine keep their parameters in one shared copy this way
  // (ProcessGroup::place_in_shared_memory), and a replica's backward writes gradients into its
  // process's gradient arena (ops::detail::grad_buffer, on a new buffer: nothing to copy). No other
  // thread may use the buffer meanwhile.
  void relocate(void* memory, bool copy);
  int64_t bytes() const { return bytes_; }
  const std::vector<Charge>& charges() const { return charges_; }
  // The host buffer (never charged) whose memory this one holds (adopt), or nullptr: what keeps
  // the bytes alive without keeping this buffer's charges.
  std::shared_ptr<const Storage> host_source() const {
    return adopted_ != nullptr && adopted_->charges_.empty() ? adopted_ : nullptr;
  }

 private:
  friend class Tensor;  // rows_joined reads which buffer a part adopted
  Storage() = default;
  static uint64_t next_id();
  void* data_ = nullptr;
  uint64_t id_ = next_id();
  std::atomic<uint64_t> version_{0};
  int64_t elements_ = 0;
  int64_t bytes_ = 0;
  bool owned_ = true;  // false while relocated to memory someone else owns, or adopted
  std::vector<Charge> charges_;
  std::shared_ptr<Storage> adopted_;  // the buffer whose memory this one holds (adopt)
};

class Tensor {
 public:
  Tensor() = default;

  // New storage, charged per this thread's DeviceContext. Contents uninitialised.
  static Tensor empty(const Shape& shape);
  static Tensor empty(const Shape& shape, Category category, const std::string& owner);
  // The same with another element type (charged at its size: 2 bytes for bfloat16).
  static Tensor empty(const Shape& shape, DType dtype);
  static Tensor empty(const Shape& shape, DType dtype, Category category, const std::string& owner);
  static Tensor zeros(const Shape& shape);
  static Tensor zeros(const Shape& shape, Category category, const std::string& owner);
  static Tensor full(const Shape& shape, float value);
  // Host tensor (never charged) holding a copy of `values`.
  static Tensor from_vector(const Shape& shape, std::span<const float> values);
  static Tensor scalar(float value);
  // A scalar string (tf.string): bytes such as a file name, a TFRecord or an encoded image, as they
  // flow through an input pipeline. It has shape () and no float data (data() is nullptr); kernels
  // and batch() reject it.
  static Tensor from_string(std::string value);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl_->shape; }
  int rank() const { return static_cast<int>(impl_->shape.size()); }
  int64_t dim(int i) const { return impl_->shape.at(static_cast<size_t>(i < 0 ? i + rank() : i)); }
  int64_t size() const { return num_elements(impl_->shape); }
  DType dtype() const { return impl_->dtype; }
  int64_t bytes() const { return num_bytes(impl_->shape, dtype_size(impl_->dtype)); }
  bool is_abstract() const { return impl_->storage && impl_->storage->abstract(); }
  bool is_string() const { return impl_ != nullptr && impl_->string != nullptr; }
  const std::string& string_value() const;  // throws std::logic_error unless is_string()
  uint64_t id() const { return impl_->id; }

  // nullptr for an abstract tensor. data() is float32's (std::logic_error on a bfloat16 tensor: kernels
  // read one through ops' operands, framework/ops/precision.h); bfloat16_data() is bfloat16's.
  float* data() { return static_cast<float*>(raw(DType::float32)); }
  const float* data() const { return static_cast<const float*>(raw(DType::float32)); }
  uint16_t* bfloat16_data() { return static_cast<uint16_t*>(raw(DType::bfloat16)); }
  const uint16_t* bfloat16_data() const {
    return static_cast<const uint16_t*>(raw(DType::bfloat16));
  }
  float item() const;  // the value of a one-element tensor
  std::vector<float> to_vector() const;  // as float32 whatever the dtype

  // Views sharing storage (no new charge). A view is a new value for the tape (new id).
  Tensor reshape(const Shape& shape) const;
  Tensor slice_rows(int64_t begin, int64_t end) const;  // [begin, end) along dim 0

  // A new tensor of `dtype` holding this one's values (rounded to nearest even into bfloat16), charged
  // per the current context; the same tensor when it already has that dtype. Not recorded on a tape
  // (ops::cast is the differentiable form).
  Tensor to(DType dtype) const;

  // Deep copy into new storage charged per the current context.
  Tensor clone() const;
  Tensor clone(Category category, const std::string& owner) const;
  // clone(category, owner) without the copy where nothing else can read this tensor's memory: a
  // concrete host tensor (never charged) that is its buffer's only view and that no other handle
  // shares (a batch fresh from an input pipeline) gives its memory to the new tensor, charged as the
  // clone would be. Otherwise a clone. This tensor is left undefined either way.
  Tensor moved_to_context(Category category, const std::string& owner) &&;
  // Whether moved_to_context would take this tensor's memory instead of copying it.
  bool movable_to_context() const;
  // moved_to_context for a tensor whose rows go to several cores: rows [begin, end) in this tensor's
  // memory, charged per the current context as clone(category, owner) would be, without a copy. For
  // a tensor that was movable_to_context when the caller took it over and that the caller drops once
  // it has handed on every range (nobody else reads or writes it meanwhile); the memory lives as long
  // as the last tensor over it. std::logic_error on a charged, abstract or viewed tensor.
  Tensor rows_moved_to_context(int64_t begin, int64_t end, Category category, const std::string& owner) const;
  // The rows of `parts` as one tensor, where each part is rows of one host buffer that
  // rows_moved_to_context handed on, the parts consecutive there, in order, of one dtype and row
  // shape (the shards distribute(Batch&&) makes of a batch): a view of that buffer, charged nowhere,
  // as the batch was. The parts keep their charges: keep them while it is read. Undefined where the
  // parts are not such rows.
  static Tensor rows_joined(std::span<const Tensor> parts);
  void copy_from(const Tensor& other);  // same element count
  void fill(float value);

  // Dim 0 as rows, the rest flattened as columns.
  MatrixMap matrix();
  ConstMatrixMap matrix() const;
  ArrayMap array();
  ConstArrayMap array() const;

  Storage& storage() { return *impl_->storage; }
  const Storage& storage() const { return *impl_->storage; }
  // The buffer, for code that must follow it without keeping it (or its ledger charges) alive.
  std::weak_ptr<Storage> weak_storage() const { return impl_->storage; }

  // Set on the output of a softmax activation: the logits it came from, so that a cross-entropy loss
  // can use the stable fused form (Keras's `_keras_logits`).
  Tensor keras_logits() const;
  void set_keras_logits(const Tensor& logits);

  // Trainable variables are watched by every tape automatically.
  bool is_trainable_variable() const { return impl_->trainable_variable; }
  void mark_trainable_variable(bool trainable) { impl_->trainable_variable = trainable; }

 private:
  struct Impl {
    Shape shape;
    std::shared_ptr<Storage> storage;
    int64_t offset = 0;
    uint64_t id = 0;
    DType dtype = DType::float32;
    bool trainable_variable = false;
    std::shared_ptr<Impl> keras_logits;
    std::shared_ptr<const std::string> string;  // set for a string tensor (then storage is null)
  };
  static uint64_t next_id();
  // Whether `impl` (reached by `handles` handles) is a concrete host buffer's only view, holding it all.
  static bool sole_host_view(const std::shared_ptr<Impl>& impl, long handles);
  // empty(); `host`: in host memory whatever the thread's context (from_vector, scalar).
  static Tensor empty_impl(const Shape& shape, Category category, const std::string& owner, bool host,
                           DType dtype = DType::float32);
  // The element at the view's offset, if the dtype is `want` (std::logic_error otherwise).
  void* raw(DType want) {
    if (!impl_->storage) return nullptr;
    if (impl_->dtype != want) wrong_dtype(want);
    char* d = static_cast<char*>(impl_->storage->data());
    return d ? d + impl_->offset * dtype_size(want) : nullptr;
  }
  const void* raw(DType want) const {  // the same without counting as a change
    if (!impl_->storage) return nullptr;
    if (impl_->dtype != want) wrong_dtype(want);
    const char* d = static_cast<const char*>(std::as_const(*impl_->storage).data());
    return d ? d + impl_->offset * dtype_size(want) : nullptr;
  }
  [[noreturn]] void wrong_dtype(DType want) const;
  explicit Tensor(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

}  // namespace keel
