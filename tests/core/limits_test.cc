// keel's documented limits (framework/core/limits.h): range checks name the limit, input shapes are
// bounded per dimension and per example, and quoted untrusted text is short and printable.
#include "framework/core/limits.h"

#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

namespace keel {
namespace {

std::string message_of(auto&& fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no exception)";
}

TEST(LimitsTest, LimitStringNamesPowersOfTwo) {
  EXPECT_EQ(limit_string(kMaxClasses), "2^24 (16777216)");
  EXPECT_EQ(limit_string(kMaxCores), "2^12 (4096)");
  EXPECT_EQ(limit_string(kMaxEpochs), "1000000");
  EXPECT_EQ(limit_string(1), "1");
  EXPECT_EQ(limit_string(0), "0");
}

TEST(LimitsTest, CheckInRangeNamesTheValueAndTheLimit) {
  EXPECT_EQ(check_in_range("--classes", 10, 1, kMaxClasses), 10);
  EXPECT_EQ(check_in_range("--classes", kMaxClasses, 1, kMaxClasses), kMaxClasses);
  EXPECT_EQ(message_of([] { check_in_range("--classes", int64_t{1} << 62, 1, kMaxClasses); }),
            "--classes must be between 1 and 2^24 (16777216), got 4611686018427387904 (keel's limit; see README "
            "\"Limits\")");
  EXPECT_EQ(message_of([] { check_in_range("--cores", 0, 1, kMaxCores); }),
            "--cores must be between 1 and 2^12 (4096), got 0 (keel's limit; see README \"Limits\")");
}

TEST(LimitsTest, InputShapesAreBoundedPerDimensionAndPerExample) {
  check_input_shape("--input-shape", {224, 224, 3});
  check_input_shape("--input-shape", {784});
  check_input_shape("--input-shape", {16384, 16384, 1});  // exactly 2^28 elements
  EXPECT_NE(message_of([] { check_input_shape("--input-shape", {100000, 100000, 3}); }).find("2^16"), std::string::npos);
  EXPECT_NE(message_of([] { check_input_shape("--input-shape", {65536, 65536, 3}); }).find("2^28"), std::string::npos);
  EXPECT_NE(message_of([] { check_input_shape("--input-shape", {}); }).find("1 to 4 dimensions"), std::string::npos);
  EXPECT_NE(message_of([] { check_input_shape("--input-shape", {1, 1, 1, 1, 1}); }).find("1 to 4"), std::string::npos);
  EXPECT_NE(message_of([] { check_input_shape("--input-shape", {28, 0}); }).find("got 0"), std::string::npos);
}

TEST(LimitsTest, QuotedTextIsTruncatedAndPrintable) {
  EXPECT_EQ(quote_untrusted("resnet50"), "resnet50");
  EXPECT_EQ(quote_untrusted("a\nb\x1b[2J"), "a\\x0ab\\x1b[2J");
  const std::string huge(1 << 20, 'x');
  const std::string q = quote_untrusted(huge);
  EXPECT_EQ(q, std::string(kMaxQuotedBytes, 'x') + "... (1048576 bytes)");
  EXPECT_LT(q.size(), 256u);
  EXPECT_EQ(quote_untrusted("abcdef", 3), "abc... (6 bytes)");
  EXPECT_EQ(quote_untrusted("caf\xc3\xa9"), "caf\xc3\xa9") << "UTF-8 passes through";
}

}  // namespace
}  // namespace keel
