// FlushSubnormals (framework/core/float_environment.h): on for its scope, nested, put back after, a
// thread's own; and what it does to arithmetic: a subnormal result becomes zero and a subnormal
// operand counts as zero, while normal floats compute as before.
#include "framework/core/float_environment.h"

#include <gtest/gtest.h>

#include <limits>
#include <thread>

namespace keel {
namespace {

// Through volatile: the compiler must not fold the product at compile time (without the mode).
float product(float a, float b) {
  volatile float x = a, y = b;
  return x * y;
}

constexpr float kMin = std::numeric_limits<float>::min();  // the smallest normal float

TEST(FlushSubnormalsTest, OnForItsScopeNestedAndPutBackAfter) {
  if (!FlushSubnormals::available()) GTEST_SKIP() << "this CPU has no flush-to-zero mode";
  ASSERT_FALSE(FlushSubnormals::active()) << "a thread starts without the mode";
  {
    const FlushSubnormals outer;
    EXPECT_TRUE(FlushSubnormals::active());
    {
      const FlushSubnormals inner;
      EXPECT_TRUE(FlushSubnormals::active());
    }
    EXPECT_TRUE(FlushSubnormals::active()) << "the inner scope put back the outer's mode";
  }
  EXPECT_FALSE(FlushSubnormals::active());
  std::thread([] {
    const FlushSubnormals flush;
    EXPECT_TRUE(FlushSubnormals::active());
  }).join();
  EXPECT_FALSE(FlushSubnormals::active()) << "another thread's mode is its own";
}

TEST(FlushSubnormalsTest, SubnormalResultsAndOperandsAreZeroNormalOnesUnchanged) {
  if (!FlushSubnormals::available()) GTEST_SKIP() << "this CPU has no flush-to-zero mode";
  const float half_min = product(kMin, 0.5f);
  ASSERT_GT(half_min, 0.0f) << "without the mode the product is subnormal";
  ASSERT_LT(half_min, kMin);
  {
    const FlushSubnormals flush;
    EXPECT_EQ(product(kMin, 0.5f), 0.0f) << "a subnormal result";
    EXPECT_EQ(product(half_min, 4.0f), 0.0f) << "a subnormal operand (2 * min without the mode)";
    EXPECT_EQ(product(kMin, 2.0f), 2.0f * kMin);
    EXPECT_EQ(product(3.0f, 0.1f), 3.0f * 0.1f);
  }
  EXPECT_EQ(product(kMin, 0.5f), half_min);
}

}  // namespace
}  // namespace keel
