// Shape helpers and the ledger's category names (a contract of `keel memory --json`).
#include "framework/core/shape.h"

#include <set>
#include <string>

#include <gtest/gtest.h>

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
