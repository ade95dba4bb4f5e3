#include "framework/core/tensor.h"

#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>

#include "framework/core/host_allocator.h"
#include "framework/core/storage_charging.h"
#include "framework/core/thread_pool.h"

namespace keel {

std::shared_ptr<Storage> Storage::allocate(int64_t elements, const Shape& shape, Category category,
                                           const std::string& owner, DType dtype) {
  if (elements < 0) throw std::invalid_argument("negative tensor size " + shape_string(shape));
  std::shared_ptr<Storage> s(new Storage());
  s->elements_ = elements;
  const int64_t bytes = checked_mul(elements, dtype_size(dtype), "tensor bytes");
  // Charge first: an allocation that does not fit must fail before any memory is taken. On a throw,
  // the destructor releases the charges made so far.
  const bool abstract = device_hooks::charge_new_storage(bytes, category, owner, shape, s->charges_);
  if (!abstract && elements > 0) {
    s->data_ = host_allocate(static_cast<size_t>(bytes));
    s->bytes_ = bytes;
  }
  return s;
}

std::shared_ptr<Storage> Storage::allocate_host(int64_t elements, DType dtype) {
  if (elements < 0) throw std::invalid_argument("negative tensor size");
  std::shared_ptr<Storage> s(new Storage());
  s->elements_ = elements;
  const int64_t bytes = checked_mul(elements, dtype_size(dtype), "tensor bytes");
  if (elements > 0) {
    s->data_ = host_allocate(static_cast<size_t>(bytes));
    s->bytes_ = bytes;
  }
  return s;
}

std::shared_ptr<Storage> Storage::adopt(std::shared_ptr<Storage> source, int64_t offset, int64_t elements,
                                        const Shape& shape, Category category, const std::string& owner, DType dtype) {
  const int64_t bytes = checked_mul(elements, dtype_size(dtype), "tensor bytes");
  if (source == nullptr || source->abstract() || offset < 0 || bytes > source->bytes_ - std::min(offset, source->bytes_)) {
    throw std::logic_error("Storage::adopt: a concrete buffer of " + std::to_string(bytes) + " bytes from byte " +
                           std::to_string(offset) + " expected");
  }
  std::shared_ptr<Storage> s(new Storage());
  s->elements_ = elements;
  const bool abstract = device_hooks::charge_new_storage(bytes, category, owner, shape, s->charges_);
  if (!abstract && elements > 0) {
    s->data_ = static_cast<char*>(source->data_) + offset;
    s->bytes_ = bytes;
    s->owned_ = false;
    s->adopted_ = std::move(source);
  }
  return s;
}

Storage::~Storage() {
  if (!charges_.empty()) device_hooks::release(charges_);
  if (owned_) host_free(data_, static_cast<size_t>(bytes_));
}

void Storage::relocate(void* memory, bool copy) {
  if (data_ == nullptr || memory == data_) return;
  const size_t bytes = static_cast<size_t>(bytes_);
  void* to = memory != nullptr ? memory : host_allocate(bytes);
  if (copy || memory == nullptr) std::memcpy(to, data_, bytes);
  if (owned_) host_free(data_, bytes);
  data_ = to;
  owned_ = memory == nullptr;
  version_.fetch_add(1, std::memory_order_relaxed);
}

void Storage::retag(Category category, const std::string& owner) {
  device_hooks::retag(charges_, category, owner);
}

namespace {
uint64_t next_unique_id() {  // tensors' and storages' ids: never 0, never reused
  static std::atomic<uint64_t> counter{1};
  return counter.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

uint64_t Storage::next_id() { return next_unique_id(); }
uint64_t Tensor::next_id() { return next_unique_id(); }

Tensor Tensor::empty(const Shape& shape) {
  return empty(shape, device_hooks::default_category(), device_hooks::default_owner());
}

Tensor Tensor::empty(const Shape& shape, Category category, const std::string& owner) {
  return empty_impl(shape, category, owner, /*host=*/false);
}

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  return empty(shape, dtype, device_hooks::default_category(), device_hooks::default_owner());
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Category category, const std::string& owner) {
  return empty_impl(shape, category, owner, /*host=*/false, dtype);
}

void Tensor::wrong_dtype(DType want) const {
  throw std::logic_error(std::string("a ") + dtype_name(impl_->dtype) + " tensor of shape " + shape_string(impl_->shape) +
                         " read as " + dtype_name(want));
}

Tensor Tensor::empty_impl(const Shape& shape, Category category, const std::string& owner, bool host, DType dtype) {
  for (int64_t d : shape) {
    if (d < 0) throw std::invalid_argument("tensor shape has a negative dimension: " + shape_string(shape));
  }
  auto impl = std::make_shared<Impl>();
  impl->shape = shape;
  impl->dtype = dtype;
  impl->storage = host ? Storage::allocate_host(num_elements(shape), dtype)
                       : Storage::allocate(num_elements(shape), shape, category, owner, dtype);
  impl->id = next_id();
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape) {
  Tensor t = empty(shape);
  t.fill(0.0f);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, Category category, const std::string& owner) {
  Tensor t = empty(shape, category, owner);
  t.fill(0.0f);
  return t;
}

Tensor Tensor::full(const Shape& shape, float value) {
  Tensor t = empty(shape);
  t.fill(value);
  return t;
}

Tensor Tensor::from_vector(const Shape& shape, std::span<const float> values) {
  if (static_cast<int64_t>(values.size()) != num_elements(shape)) {
    throw std::invalid_argument("from_vector: " + std::to_string(values.size()) + " values for shape " +
                                shape_string(shape));
  }
  Tensor t = empty_impl(shape, Category::activations, "", /*host=*/true);
  if (!values.empty()) std::memcpy(t.data(), values.data(), values.size() * sizeof(float));
  return t;
}

Tensor Tensor::scalar(float value) {
  Tensor t = empty_impl({}, Category::activations, "", /*host=*/true);
  t.fill(value);
  return t;
}

Tensor Tensor::from_string(std::string value) {
  auto impl = std::make_shared<Impl>();
  impl->id = next_id();
  impl->string = std::make_shared<const std::string>(std::move(value));
  return Tensor(std::move(impl));
}

const std::string& Tensor::string_value() const {
  if (!is_string()) {
    throw std::logic_error("string_value() on a float tensor of shape " +
                           (defined() ? shape_string(shape()) : std::string("(undefined)")));
  }
  return *impl_->string;
}

float Tensor::item() const {
  if (is_string()) throw std::logic_error("item() on a string tensor");
  if (size() != 1) throw std::logic_error("item() on a tensor of shape " + shape_string(shape()));
  if (is_abstract()) return 0.0f;
  return dtype() == DType::bfloat16 ? bfloat16_to_float(bfloat16_data()[0]) : data()[0];
}

std::vector<float> Tensor::to_vector() const {
  if (is_string()) throw std::logic_error("to_vector() on a string tensor");
  if (is_abstract()) return std::vector<float>(static_cast<size_t>(size()), 0.0f);
  if (dtype() == DType::bfloat16) {
    std::vector<float> out(static_cast<size_t>(size()));
    from_bfloat16(bfloat16_data(), out.data(), size());
    return out;
  }
  return std::vector<float>(data(), data() + size());
}

Tensor Tensor::to(DType target) const {
  if (is_string()) throw std::logic_error("to() on a string tensor");
  if (dtype() == target) return *this;
  Tensor t = empty(shape(), target);
  if (t.is_abstract() || is_abstract() || size() == 0) return t;
  if (target == DType::bfloat16) {
    to_bfloat16(data(), t.bfloat16_data(), size());
  } else {
    from_bfloat16(bfloat16_data(), t.data(), size());
  }
  return t;
}

Tensor Tensor::reshape(const Shape& new_shape) const {
  Shape resolved = new_shape;
  int64_t known = 1;
  int unknown = -1;
  for (size_t i = 0; i < resolved.size(); ++i) {
    if (resolved[i] == -1) {
      if (unknown >= 0) throw std::invalid_argument("reshape: more than one -1 in " + shape_string(new_shape));
      unknown = static_cast<int>(i);
    } else {
      known = checked_mul(known, resolved[i], "reshape");
    }
  }
  if (unknown >= 0 && known > 0) resolved[static_cast<size_t>(unknown)] = size() / known;
  if (num_elements(resolved) != size()) {
    throw std::invalid_argument("cannot reshape " + shape_string(shape()) + " to " + shape_string(new_shape));
  }
  auto impl = std::make_shared<Impl>(*impl_);
  impl->shape = std::move(resolved);
  impl->id = next_id();
  impl->trainable_variable = false;
  impl->keras_logits = nullptr;
  return Tensor(std::move(impl));
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  if (rank() < 1 || begin < 0 || end < begin || end > dim(0)) {
    throw std::out_of_range("slice_rows [" + std::to_string(begin) + ", " + std::to_string(end) + ") of " +
                            shape_string(shape()));
  }
  auto impl = std::make_shared<Impl>(*impl_);
  impl->shape[0] = end - begin;
  impl->offset += begin * (dim(0) == 0 ? 0 : size() / dim(0));
  impl->id = next_id();
  impl->trainable_variable = false;
  impl->keras_logits = nullptr;
  return Tensor(std::move(impl));
}

Tensor Tensor::clone() const { return clone(device_hooks::default_category(), device_hooks::default_owner()); }

Tensor Tensor::clone(Category category, const std::string& owner) const {
  if (is_string()) return from_string(string_value());  // host bytes: never charged
  Tensor t = empty(shape(), dtype(), category, owner);
  if (!t.is_abstract() && !is_abstract() && size() > 0) {
    std::memcpy(t.raw(dtype()), raw(dtype()), static_cast<size_t>(bytes()));
  }
  return t;
}

bool Tensor::sole_host_view(const std::shared_ptr<Impl>& impl, long handles) {
  const std::shared_ptr<Storage>& storage = impl->storage;
  return impl.use_count() == handles && storage != nullptr && storage.use_count() == 1 && !storage->abstract() &&
         storage->charges().empty() && impl->offset == 0 && storage->elements() == num_elements(impl->shape) &&
         storage->bytes() == num_bytes(impl->shape, dtype_size(impl->dtype)) && !impl->keras_logits;
}

bool Tensor::movable_to_context() const { return impl_ != nullptr && sole_host_view(impl_, 1); }

Tensor Tensor::moved_to_context(Category category, const std::string& owner) && {
  const std::shared_ptr<Impl> impl = std::move(impl_);
  const Tensor source(impl);
  // Only this call's handles (impl, source) reach the buffer, and it is host memory holding exactly
  // this tensor: handing it on is invisible to everyone else.
  if (!sole_host_view(impl, 2)) return source.clone(category, owner);
  auto moved = std::make_shared<Impl>();
  moved->shape = impl->shape;
  moved->dtype = impl->dtype;
  moved->storage = Storage::adopt(impl->storage, 0, source.size(), impl->shape, category, owner, impl->dtype);
  moved->id = next_id();
  return Tensor(std::move(moved));  // in a plan's context, abstract with the charges, as a clone
}

Tensor Tensor::rows_moved_to_context(int64_t begin, int64_t end, Category category, const std::string& owner) const {
  const std::shared_ptr<Storage>& storage = impl_->storage;
  if (storage == nullptr || storage->abstract() || !storage->charges().empty() || impl_->offset != 0) {
    throw std::logic_error("rows_moved_to_context: a host tensor's own buffer expected");
  }
  const Tensor rows = slice_rows(begin, end);  // checks the range
  auto moved = std::make_shared<Impl>();
  moved->shape = rows.shape();
  moved->dtype = impl_->dtype;
  moved->storage = Storage::adopt(storage, rows.impl_->offset * dtype_size(impl_->dtype), rows.size(), moved->shape,
                                  category, owner, impl_->dtype);
  moved->id = next_id();
  return Tensor(std::move(moved));
}

Tensor Tensor::rows_joined(std::span<const Tensor> parts) {
  if (parts.empty() || !parts[0].defined() || parts[0].rank() < 1 || parts[0].impl_->storage == nullptr) return Tensor();
  const Impl& first = *parts[0].impl_;
  const std::shared_ptr<Storage>& source = first.storage->adopted_;
  if (source == nullptr || !source->charges_.empty() || source->data_ == nullptr) return Tensor();
  const char* next = static_cast<const char*>(first.storage->data_);
  int64_t rows = 0;
  for (const Tensor& part : parts) {
    if (!part.defined() || part.impl_->storage == nullptr) return Tensor();
    const Impl& p = *part.impl_;
    const bool same_rows = p.dtype == first.dtype && p.shape.size() == first.shape.size() &&
                           std::equal(p.shape.begin() + 1, p.shape.end(), first.shape.begin() + 1);
    if (p.storage->adopted_ != source || p.offset != 0 || !same_rows || p.storage->data_ != next || p.shape[0] < 1) return Tensor();
    next += p.storage->bytes_;
    rows += p.shape[0];
  }
  auto joined = std::make_shared<Impl>();
  joined->shape = first.shape;
  joined->shape[0] = rows;
  joined->dtype = first.dtype;
  joined->storage = source;
  joined->offset = (static_cast<const char*>(first.storage->data_) - static_cast<const char*>(source->data_)) /
                   dtype_size(first.dtype);
  joined->id = next_id();
  return Tensor(std::move(joined));
}

void Tensor::copy_from(const Tensor& other) {
  if (other.size() != size() || other.dtype() != dtype()) {
    throw std::invalid_argument("copy_from: " + std::string(dtype_name(other.dtype())) + " " + shape_string(other.shape()) +
                                " into " + dtype_name(dtype()) + " " + shape_string(shape()));
  }
  if (is_abstract() || other.is_abstract() || size() == 0) return;
  std::memcpy(raw(dtype()), other.raw(dtype()), static_cast<size_t>(bytes()));
}

void Tensor::fill(float value) {
  if (is_abstract() || size() == 0) return;
  // Large tensors (gradient buffers of big activations) on the thread's share of the compute threads.
  constexpr int64_t kBlock = int64_t{1} << 16;
  const int64_t n = size();
  const auto block = [&](int64_t b) {
    const int64_t begin = b * kBlock, count = std::min(kBlock, n - begin);
    if (dtype() == DType::bfloat16) {
      std::fill_n(bfloat16_data() + begin, count, bfloat16_bits(value));
    } else {
      std::fill_n(data() + begin, count, value);
    }
  };
  parallel_for((n + kBlock - 1) / kBlock, block, threads_worth(static_cast<double>(n), kMinElementsPerThread));
}

MatrixMap Tensor::matrix() {
  const int64_t rows = rank() == 0 ? 1 : dim(0);
  return MatrixMap(data(), rows, rows == 0 ? 0 : size() / rows);
}

ConstMatrixMap Tensor::matrix() const {
  const int64_t rows = rank() == 0 ? 1 : dim(0);
  return ConstMatrixMap(data(), rows, rows == 0 ? 0 : size() / rows);
}

ArrayMap Tensor::array() { return ArrayMap(data(), size()); }
ConstArrayMap Tensor::array() const { return ConstArrayMap(data(), size()); }

Tensor Tensor::keras_logits() const {
  return impl_->keras_logits ? Tensor(impl_->keras_logits) : Tensor();
}

void Tensor::set_keras_logits(const Tensor& logits) { impl_->keras_logits = logits.impl_; }

}  // namespace keel
