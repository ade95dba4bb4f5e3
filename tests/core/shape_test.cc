// Shape helpers (overflow-checked sizes) and the ledger's category names (a contract of `keel memory --json`).
#include "framework/core/shape.h"

#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "framework/core/limits.h"

namespace keel {
namespace {

TEST(ShapeTest, NumElementsIsTheProductOfTheDimensions) {
  EXPECT_EQ(num_elements({}), 1) << "a scalar holds one element";
  EXPECT_EQ(num_elements({7}), 7);
  EXPECT_EQ(num_elements({16, 784}), 12544);
  EXPECT_EQ(num_elements({2, 3, 4, 5}), 120);
  EXPECT_EQ(num_elements({3, 0, 5}), 0) << "a zero dimension empties the tensor";
  EXPECT_EQ(num_elements({1, 1, 1}), 1);
  EXPECT_EQ(num_elements({128, 224, 224, 3}), int64_t{128} * 224 * 224 * 3) << "no 32-bit overflow";
}

// Overflow never wraps: past the per-tensor limit (or int64) the product is refused with a message
// naming the shape and the limit, whatever the order of the dimensions.
TEST(ShapeTest, NumElementsRefusesProductsPastTheLimit) {
  const int64_t big = int64_t{1} << 40;
  for (const Shape& s : {Shape{big, big}, Shape{1 << 20, 1 << 20, 1 << 20}, Shape{INT64_MAX, 2},
                         Shape{3, int64_t{1} << 62}, Shape{int64_t{1} << 29, int64_t{1} << 30}}) {
    try {
      num_elements(s);
      ADD_FAILURE() << shape_string(s) << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(shape_string(s)), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("2^58"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(num_elements({kMaxTensorElements}), kMaxTensorElements) << "the limit itself is allowed";
  EXPECT_THROW(num_elements({kMaxTensorElements + 1}), std::invalid_argument);
  EXPECT_EQ(num_elements({-1, 10}), -10) << "an unknown dimension keeps its sign, as before";
}

TEST(ShapeTest, NumBytesIsCheckedToo) {
  EXPECT_EQ(num_bytes({16, 784}, 4), 16 * 784 * 4);
  EXPECT_EQ(num_bytes({kMaxTensorElements}, 4), kMaxTensorElements * 4);
  EXPECT_THROW(num_bytes({kMaxTensorElements}, 64), std::invalid_argument);
}

TEST(ShapeTest, CheckedMulAndAddNameWhatOverflowed) {
  EXPECT_EQ(checked_mul(16, 8, "global batch"), 128);
  EXPECT_EQ(checked_mul(-3, 5, "x"), -15);
  EXPECT_EQ(checked_add(INT64_MAX - 1, 1, "x"), INT64_MAX);
  try {
    checked_mul(int64_t{1} << 62, 4096, "the global batch");
    ADD_FAILURE() << "2^62 * 4096 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "the global batch overflows: 4611686018427387904 * 4096 does not fit in 64 bits");
  }
  EXPECT_THROW(checked_add(INT64_MAX, 1, "x"), std::invalid_argument);
  EXPECT_THROW(checked_add(INT64_MIN, -1, "x"), std::invalid_argument);
  EXPECT_THROW(checked_mul(INT64_MIN, -1, "x"), std::invalid_argument);
}

TEST(ShapeTest, ShapeStringPrintsLikeKeras) {
  EXPECT_EQ(shape_string({}), "()");
  EXPECT_EQ(shape_string({5}), "(5,)") << "a 1-tuple keeps Python's trailing comma";
  EXPECT_EQ(shape_string({16, 784}), "(16, 784)");
  EXPECT_EQ(shape_string({2, 28, 28, 1}), "(2, 28, 28, 1)");
  EXPECT_EQ(shape_string({0, 3}), "(0, 3)");
}

TEST(ShapeTest, UnknownDimensionsPrintAsNone) {
  EXPECT_EQ(shape_string({-1, 10}), "(None, 10)");
  EXPECT_EQ(shape_string({-1}), "(None,)");
  EXPECT_EQ(shape_string({-1, 112, 112, 64}), "(None, 112, 112, 64)");
}

TEST(ShapeTest, CategoryNamesAreTheContractNamesInOrder) {
  ASSERT_EQ(kNumCategories, 6);
  const char* want[] = {"parameters", "gradients", "optimizer", "activations", "inputs", "workspace"};
  std::set<std::string> seen;
  for (int i = 0; i < kNumCategories; ++i) {
    EXPECT_STREQ(category_name(static_cast<Category>(i)), want[i]) << "category " << i;
    seen.insert(category_name(static_cast<Category>(i)));
  }
  EXPECT_EQ(seen.size(), 6u) << "every category has its own name";
  EXPECT_EQ(static_cast<int>(Category::parameters), 0);
  EXPECT_EQ(static_cast<int>(Category::workspace), kNumCategories - 1);
}

TEST(ShapeTest, OutOfRangeCategoryIsUnknown) {
  EXPECT_STREQ(category_name(static_cast<Category>(kNumCategories)), "unknown");
  EXPECT_STREQ(category_name(static_cast<Category>(-1)), "unknown");
}

}  // namespace
}  // namespace keel
