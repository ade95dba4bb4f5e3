// Tensor: string scalars (tf.string) beside float tensors; a buffer moved to memory its owner lends.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "framework/core/tensor.h"
#include "framework/device/context.h"

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

}  // namespace
}  // namespace keel
