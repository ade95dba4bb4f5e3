// Tensor: string scalars (tf.string) beside float tensors; a buffer moved to memory its owner lends;
// a host buffer handed to a core without a copy.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "framework/core/tensor.h"
#include "framework/device/context.h"
#include "framework/device/ledger.h"

namespace keel {
namespace {

TEST(TensorTest, StringScalarsHoldBytesAndNoFloatData) {
  const std::string bytes("a\0b\xff", 4);  // any bytes, embedded NULs included
  const Tensor s = Tensor::from_string(bytes);
  ASSERT_TRUE(s.defined());
  EXPECT_TRUE(s.is_string());
  EXPECT_EQ(s.string_value(), bytes);
  EXPECT_EQ(s.rank(), 0);
  EXPECT_EQ(s.data(), nullptr);
  EXPECT_FALSE(s.is_abstract());
  EXPECT_THROW(s.item(), std::logic_error);
  EXPECT_THROW(s.to_vector(), std::logic_error);
  const Tensor copy = s.clone();
  EXPECT_TRUE(copy.is_string());
  EXPECT_EQ(copy.string_value(), bytes);
  EXPECT_NE(copy.id(), s.id());
}

TEST(TensorTest, FloatTensorsAreNotStrings) {
  HostScope host;
  const Tensor t = Tensor::scalar(2.0f);
  EXPECT_FALSE(t.is_string());
  EXPECT_THROW(t.string_value(), std::logic_error);
  EXPECT_FALSE(Tensor().is_string());
}

// What ProcessGroup::place_in_shared_memory does with a parameter: the buffer moves to memory
// someone else owns and back, keeping its values, and each move counts as a change of the contents.
// The lent memory is never freed by the buffer (AddressSanitizer would see it).
TEST(TensorTest, ABufferMovesToLentMemoryAndBackWithItsValues) {
  HostScope host;
  Tensor t = Tensor::from_vector({5}, std::vector<float>{1, 2, 3, 4, 5});
  const Tensor view = t;  // another handle on the same buffer
  const uint64_t before = t.storage().version();
  std::vector<float> lent(5, -1.0f);
  t.storage().relocate(lent.data(), /*copy=*/true);
  EXPECT_EQ(static_cast<const Tensor&>(t).data(), lent.data());
  EXPECT_EQ(view.to_vector(), (std::vector<float>{1, 2, 3, 4, 5}));
  EXPECT_GT(t.storage().version(), before);
  lent[2] = 30.0f;  // another process writing the lent memory
  EXPECT_EQ(view.to_vector(), (std::vector<float>{1, 2, 30, 4, 5}));
  std::vector<float> other = {6, 7, 8, 9, 10};  // contents written elsewhere: moved to without a copy
  t.storage().relocate(other.data(), /*copy=*/false);
  EXPECT_EQ(view.to_vector(), (std::vector<float>{6, 7, 8, 9, 10}));
  t.storage().relocate(nullptr, /*copy=*/true);  // home again, with the values
  EXPECT_NE(static_cast<const Tensor&>(t).data(), other.data());
  other.assign(5, 0.0f);
  EXPECT_EQ(view.to_vector(), (std::vector<float>{6, 7, 8, 9, 10}));
}

// moved_to_context: a host tensor nobody else holds gives its memory to the core's tensor, charged as
// a clone is; one that another handle or a view still reads is cloned. The source is left undefined.
TEST(TensorTest, MovedToContextTakesMemoryOnlyWhereNothingElseReadsIt) {
  Ledger ledger(DeviceSpec::custom(1, 0));
  const DeviceContext core{.ledger = &ledger, .core = 0};
  Tensor alone;
  {
    HostScope host;
    alone = Tensor::from_vector({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  }
  const float* memory = std::as_const(alone).data();
  std::weak_ptr<Storage> source = alone.weak_storage();
  {
    ContextScope on_core(core);
    const Tensor moved = std::move(alone).moved_to_context(Category::inputs, "x");
    EXPECT_FALSE(alone.defined());
    EXPECT_EQ(std::as_const(moved).data(), memory);
    EXPECT_EQ(moved.to_vector(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
    EXPECT_EQ(ledger.core(0).stat(Category::inputs).current, 24);
    EXPECT_FALSE(source.expired());
  }
  EXPECT_TRUE(source.expired());
  EXPECT_EQ(ledger.core(0).stat(Category::inputs).current, 0);

  Tensor shared, viewed, charged;
  Tensor handle, view;
  {
    HostScope host;
    shared = Tensor::from_vector({2}, std::vector<float>{7, 8});
    viewed = Tensor::from_vector({2}, std::vector<float>{9, 10});
    handle = shared;
    view = viewed.slice_rows(1, 2);
  }
  ContextScope on_core(core);
  charged = Tensor::from_vector({1}, std::vector<float>{11}).clone(Category::activations, "c");
  const float* charged_memory = std::as_const(charged).data();
  const Tensor a = std::move(shared).moved_to_context(Category::inputs, "a");
  const Tensor b = std::move(viewed).moved_to_context(Category::inputs, "b");
  const Tensor c = std::move(charged).moved_to_context(Category::inputs, "c");
  EXPECT_NE(std::as_const(a).data(), std::as_const(handle).data());
  EXPECT_EQ(a.to_vector(), (std::vector<float>{7, 8}));
  EXPECT_EQ(b.to_vector(), (std::vector<float>{9, 10}));
  EXPECT_NE(std::as_const(c).data(), charged_memory);  // already charged: a copy
  EXPECT_EQ(ledger.core(0).stat(Category::inputs).current, 8 + 8 + 4);
}

// rows_moved_to_context: row ranges of a host tensor each become a tensor of their own over its
// memory, charged to the context each is taken in; the memory lives until the last of them goes.
// movable_to_context says whether moved_to_context would take the memory.
TEST(TensorTest, RowsMovedToContextShareTheMemoryAndChargeEachCore) {
  Ledger ledger(DeviceSpec::custom(2, 0));
  Tensor batch;
  {
    HostScope host;
    batch = Tensor::from_vector({3, 2}, std::vector<float>{1, 2, 3, 4, 5, 6});
  }
  EXPECT_TRUE(batch.movable_to_context());
  Tensor other = batch;
  EXPECT_FALSE(batch.movable_to_context());  // another handle reads it
  EXPECT_FALSE(batch.slice_rows(0, 1).movable_to_context());
  const float* memory = std::as_const(batch).data();
  std::weak_ptr<Storage> source = batch.weak_storage();
  Tensor first, second;
  {
    ContextScope on_core(DeviceContext{.ledger = &ledger, .core = 0});
    first = batch.rows_moved_to_context(0, 2, Category::inputs, "x");
  }
  {
    ContextScope on_core(DeviceContext{.ledger = &ledger, .core = 1});
    second = batch.rows_moved_to_context(2, 3, Category::inputs, "x");
    EXPECT_THROW(first.rows_moved_to_context(0, 1, Category::inputs, "x"), std::logic_error);  // charged
    EXPECT_THROW(batch.rows_moved_to_context(2, 4, Category::inputs, "x"), std::out_of_range);
  }
  batch = Tensor();
  EXPECT_EQ(std::as_const(first).data(), memory);
  EXPECT_EQ(std::as_const(second).data(), memory + 4);
  EXPECT_EQ(first.to_vector(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(second.to_vector(), (std::vector<float>{5, 6}));
  EXPECT_EQ(ledger.core(0).stat(Category::inputs).current, 16);
  EXPECT_EQ(ledger.core(1).stat(Category::inputs).current, 8);
  first = Tensor();
  EXPECT_EQ(ledger.core(0).stat(Category::inputs).current, 0);
  EXPECT_FALSE(source.expired());
  other = Tensor();
  EXPECT_EQ(second.to_vector(), (std::vector<float>{5, 6}));
  second = Tensor();
  EXPECT_TRUE(source.expired());
  EXPECT_EQ(ledger.core(1).stat(Category::inputs).current, 0);
}

}  // namespace
}  // namespace keel
