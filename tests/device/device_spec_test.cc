#include "framework/device/device_spec.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace keel {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(DeviceSpecTest, Presets) {
  const DeviceSpec v3 = DeviceSpec::preset("v3-8");
  EXPECT_EQ(v3.name, "v3-8");
  EXPECT_EQ(v3.cores, 8);
  EXPECT_EQ(v3.hbm_bytes_per_core, 16 * kGiB);
  EXPECT_TRUE(v3.has_budget());

  const DeviceSpec v4 = DeviceSpec::preset("v4-8");
  EXPECT_EQ(v4.cores, 4);
  EXPECT_EQ(v4.hbm_bytes_per_core, 32 * kGiB);

  const DeviceSpec v5p = DeviceSpec::preset("v5p-8");
  EXPECT_EQ(v5p.cores, 4);
  EXPECT_EQ(v5p.hbm_bytes_per_core, int64_t{95} * 1000 * 1000 * 1000);

  const DeviceSpec cpu = DeviceSpec::preset("cpu");
  EXPECT_EQ(cpu.cores, 1);
  EXPECT_EQ(cpu.hbm_bytes_per_core, 0);
  EXPECT_FALSE(cpu.has_budget());
}

TEST(DeviceSpecTest, EveryListedPresetResolves) {
  ASSERT_FALSE(DeviceSpec::preset_names().empty());
  for (const std::string& name : DeviceSpec::preset_names()) {
    const DeviceSpec s = DeviceSpec::preset(name);
    EXPECT_EQ(s.name, name);
    EXPECT_GE(s.cores, 1) << name;
  }
}

TEST(DeviceSpecTest, UnknownPresetNamesTheKnownOnes) {
  try {
    DeviceSpec::preset("v9-8");
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_THAT(msg, HasSubstr("v9-8"));
    for (const std::string& name : DeviceSpec::preset_names()) EXPECT_THAT(msg, HasSubstr(name));
    for (const char* name : {"cpu", "v3-8", "v4-8", "v5p-8"}) EXPECT_THAT(msg, HasSubstr(name));
  }
}

TEST(DeviceSpecTest, Custom) {
  const DeviceSpec s = DeviceSpec::custom(3, 12345);
  EXPECT_EQ(s.name, "custom");
  EXPECT_EQ(s.cores, 3);
  EXPECT_EQ(s.hbm_bytes_per_core, 12345);
  EXPECT_FALSE(DeviceSpec::custom(2, 0).has_budget());
  EXPECT_THROW(DeviceSpec::custom(0, 100), std::invalid_argument);
  EXPECT_THROW(DeviceSpec::custom(-1, 100), std::invalid_argument);
  EXPECT_THROW(DeviceSpec::custom(2, -1), std::invalid_argument);
  EXPECT_THROW(DeviceSpec::custom(4097, 100), std::invalid_argument) << "cores past keel's limit, 4096";
  EXPECT_THROW(DeviceSpec::custom(2, (int64_t{1} << 50) + 1), std::invalid_argument) << "HBM past 2^50 bytes";
  EXPECT_EQ(DeviceSpec::custom(4096, int64_t{1} << 50).cores, 4096);
}

TEST(DeviceSpecTest, ValidateChecksASpecReadBack) {
  DeviceSpec::preset("v3-8").validate();
  DeviceSpec::preset("cpu").validate();
  for (const DeviceSpec& bad : {DeviceSpec{"x", 1000000, 0}, DeviceSpec{"x", 0, 0}, DeviceSpec{"x", 8, -1},
                                DeviceSpec{"", 8, 0}, DeviceSpec{std::string(1000, 'n'), 8, 0},
                                DeviceSpec{"x", 8, INT64_MAX}}) {
    EXPECT_THROW(bad.validate(), std::invalid_argument) << bad.name.size() << " " << bad.cores;
  }
  try {
    DeviceSpec{"v3-8", 1000000, 1}.validate();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("2^12 (4096), got 1000000"));
  }
}

TEST(ParseBytesTest, UnitsAndPlainNumbers) {
  EXPECT_EQ(parse_bytes("1048576"), 1048576);
  EXPECT_EQ(parse_bytes("100B"), 100);
  EXPECT_EQ(parse_bytes("1KiB"), 1024);
  EXPECT_EQ(parse_bytes("512MiB"), 512 * (int64_t{1} << 20));
  EXPECT_EQ(parse_bytes("16GiB"), 16 * kGiB);
  EXPECT_EQ(parse_bytes("95GB"), int64_t{95} * 1000 * 1000 * 1000);
  EXPECT_EQ(parse_bytes("2MB"), 2000000);
  EXPECT_EQ(parse_bytes("1.5KiB"), 1536);
  EXPECT_EQ(parse_bytes("0.5GiB"), kGiB / 2);
}

TEST(ParseBytesTest, RejectsAnythingElse) {
  for (const char* bad : {"", "abc", "GiB", "-5", "-5MiB", "12XB", "5 MiB", "1e9", ".", "16gib"}) {
    EXPECT_THROW(parse_bytes(bad), std::invalid_argument) << "'" << bad << "'";
  }
}

TEST(ParseBytesTest, RejectsMalformedNumbers) {
  // std::stod reads the prefix "1.2" of "1.2.3" and ignores the rest; the parser must not.
  EXPECT_THROW(parse_bytes("1.2.3GiB"), std::invalid_argument);
  EXPECT_THROW(parse_bytes("1..5MiB"), std::invalid_argument);
}

TEST(ParseBytesTest, RejectsSizesThatDoNotFitInt64) {
  // 1e8 TiB = 1.1e20 bytes > INT64_MAX (9.2e18): llround's result is unspecified, not a size.
  EXPECT_THROW(parse_bytes("100000000TiB"), std::invalid_argument);
  EXPECT_THROW(parse_bytes("99999999999999999999"), std::invalid_argument);
}

TEST(FormatBytesTest, HumanReadable) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(512 * (int64_t{1} << 20)), "512.00 MiB");
  EXPECT_EQ(format_bytes(16 * kGiB), "16.00 GiB");
  EXPECT_EQ(format_bytes(int64_t{95} * 1000 * 1000 * 1000), "88.48 GiB");
}

TEST(FormatBytesTest, RoundTripsThroughParse) {
  for (int64_t b : {int64_t{1024}, int64_t{3} << 20, 16 * kGiB}) {
    std::string s = format_bytes(b);
    s.erase(std::remove(s.begin(), s.end(), ' '), s.end());  // "16.00GiB"
    EXPECT_EQ(parse_bytes(s), b) << s;
  }
}

}  // namespace
}  // namespace keel
