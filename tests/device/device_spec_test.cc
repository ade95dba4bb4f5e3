#include "framework/device/device_spec.h"

#include "framework/device/collectives.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

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

// Pod slices: hosts (TPU VMs) x cores per host as Google Cloud TPU documentation gives them
// (device_spec.cc names the source of each); megacore chips (v4, v5p) are one device, so v4-32 is 16
// devices; a multi-host v5e or v6e slice is made of 4-chip VMs.
TEST(DeviceSpecTest, PodSlicePresets) {
  struct Expected {
    const char* name;
    int hosts, cores_per_host;
    int64_t hbm_bytes_per_core;
  };
  const int64_t k95GB = int64_t{95} * 1000 * 1000 * 1000;
  for (const Expected& e : {Expected{"v2-32", 4, 8, 8 * kGiB}, Expected{"v2-128", 16, 8, 8 * kGiB},
                            Expected{"v3-32", 4, 8, 16 * kGiB}, Expected{"v3-128", 16, 8, 16 * kGiB},
                            Expected{"v4-32", 4, 4, 32 * kGiB}, Expected{"v4-128", 16, 4, 32 * kGiB},
                            Expected{"v5e-16", 4, 4, 16 * kGiB}, Expected{"v5e-32", 8, 4, 16 * kGiB},
                            Expected{"v5p-32", 4, 4, k95GB}, Expected{"v5p-128", 16, 4, k95GB},
                            Expected{"v6e-16", 4, 4, 32 * kGiB}, Expected{"v6e-32", 8, 4, 32 * kGiB}}) {
    const DeviceSpec s = DeviceSpec::preset(e.name);
    EXPECT_EQ(s.hosts, e.hosts) << e.name;
    EXPECT_EQ(s.cores_per_host(), e.cores_per_host) << e.name;
    EXPECT_EQ(s.cores, e.hosts * e.cores_per_host) << e.name;
    EXPECT_EQ(s.hbm_bytes_per_core, e.hbm_bytes_per_core) << e.name;
    s.validate();
  }
  const DeviceSpec v3 = DeviceSpec::preset("v3-32");
  EXPECT_EQ(v3.host_of(0), 0);
  EXPECT_EQ(v3.host_of(7), 0);
  EXPECT_EQ(v3.host_of(8), 1);
  EXPECT_EQ(v3.host_of(31), 3);
  EXPECT_EQ(v3.first_core_of(2), 16);
}

TEST(DeviceSpecTest, SingleHostPresetsHaveOneHost) {
  for (const char* name : {"cpu", "v2-8", "v3-8", "v4-8", "v5e-8", "v5p-8", "v6e-8"}) {
    const DeviceSpec s = DeviceSpec::preset(name);
    EXPECT_EQ(s.hosts, 1) << name;
    EXPECT_EQ(s.cores_per_host(), s.cores) << name;
  }
  EXPECT_EQ(DeviceSpec{}.hosts, 1) << "a spec that says nothing of hosts is one host";
}

TEST(DeviceSpecTest, CustomHostsMustDivideTheCores) {
  const DeviceSpec s = DeviceSpec::custom(12, kGiB, 3);
  EXPECT_EQ(s.hosts, 3);
  EXPECT_EQ(s.cores_per_host(), 4);
  EXPECT_EQ(DeviceSpec::custom(12, kGiB).hosts, 1);
  try {
    DeviceSpec::custom(12, kGiB, 5);
    FAIL() << "5 hosts do not divide 12 cores";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("--hosts must divide the 12 cores, got 5"));
    EXPECT_THAT(e.what(), HasSubstr("1, 2, 3, 4, 6, 12"));
  }
  EXPECT_THROW(DeviceSpec::custom(4, kGiB, 0), std::invalid_argument);
  EXPECT_THROW(DeviceSpec::custom(4, kGiB, -2), std::invalid_argument);
  EXPECT_THROW(DeviceSpec::custom(4, kGiB, 8), std::invalid_argument) << "more hosts than cores";
  EXPECT_EQ(DeviceSpec::custom(4096, kGiB, 4096).cores_per_host(), 1);
}

TEST(DeviceSpecTest, ValidateChecksStoredHosts) {
  for (const int hosts : {0, -1, 3, 16, 5000}) {
    DeviceSpec s{"x", 8, kGiB, hosts};
    EXPECT_THROW(s.validate(), std::invalid_argument) << hosts;
  }
  DeviceSpec{"x", 8, kGiB, 8}.validate();
  EXPECT_EQ(divisors(1), std::vector<int>({1}));
  EXPECT_EQ(divisors(32), std::vector<int>({1, 2, 4, 8, 16, 32}));
  EXPECT_EQ(join_ints({1, 2, 4}), "1, 2, 4");
}

// What each process of `mpirun -np P` will drive (issue 12, items 2-6 build on it).
TEST(DeviceSpecTest, ProcessesShareTheHostsInOrder) {
  const DeviceSpec v3 = DeviceSpec::preset("v3-32");
  const ProcessShare one = v3.share(1, 0);
  EXPECT_EQ(one.hosts, 4);
  EXPECT_EQ(one.cores, 32);
  EXPECT_EQ(one.first_core, 0);
  const ProcessShare last = v3.share(2, 1);
  EXPECT_EQ(last.first_host, 2);
  EXPECT_EQ(last.hosts, 2);
  EXPECT_EQ(last.first_core, 16);
  EXPECT_EQ(last.cores, 16);
  EXPECT_EQ(v3.share(4, 3).first_core, 24);
  try {
    v3.share(3, 0);
    FAIL() << "3 processes do not divide 4 hosts";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("3 processes do not divide v3-32's 4 hosts (process counts that work: 1, 2, 4)"));
  }
  EXPECT_THROW(v3.share(8, 0), std::invalid_argument);
  EXPECT_THROW(v3.share(0, 0), std::invalid_argument);
  EXPECT_THROW(v3.share(2, 2), std::invalid_argument) << "rank past the processes";
}

// For the MPI backend to come (issue 12, item 2): on every preset, summing each process's share of
// the replicas in memory and then the processes' partial sums, both in tree order, gives the bits of
// the slice's own tree-ordered sum, for every process count that divides the hosts. (It holds where
// a share is 2^k consecutive cores from a multiple of 2^k; a custom slice of 2 hosts x 3 cores is not.)
std::vector<float> sum_by_processes(const DeviceSpec& s, int processes, const std::vector<std::vector<float>>& values) {
  const int64_t count = static_cast<int64_t>(values[0].size());
  std::vector<std::vector<float>> partial(static_cast<size_t>(processes), std::vector<float>(values[0].size()));
  for (int rank = 0; rank < processes; ++rank) {
    const ProcessShare share = s.share(processes, rank);
    std::vector<const float*> in;
    for (int c = share.first_core; c < share.first_core + share.cores; ++c) in.push_back(values[static_cast<size_t>(c)].data());
    tree_sum(in, partial[static_cast<size_t>(rank)].data(), count);
  }
  std::vector<const float*> in;
  for (const std::vector<float>& p : partial) in.push_back(p.data());
  std::vector<float> out(values[0].size());
  tree_sum(in, out.data(), count);
  return out;
}

TEST(DeviceSpecTest, SummingPerProcessThenAcrossGivesTheSlicesBitsOnEveryPreset) {
  uint32_t state = 12345;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return static_cast<float>(state >> 8) / 16777216.0f * 2.0f - 1.0f;
  };
  for (const std::string& name : DeviceSpec::preset_names()) {
    const DeviceSpec s = DeviceSpec::preset(name);
    std::vector<std::vector<float>> values(static_cast<size_t>(s.cores), std::vector<float>(16));
    for (auto& v : values) {
      for (float& x : v) x = next() * (next() > 0 ? 1e6f : 1e-3f);  // mixed magnitudes: order shows in the bits
    }
    const std::vector<float> whole = sum_by_processes(s, 1, values);
    for (const int processes : divisors(s.hosts)) {
      const std::vector<float> split = sum_by_processes(s, processes, values);
      EXPECT_EQ(std::memcmp(split.data(), whole.data(), whole.size() * sizeof(float)), 0) << name << " on " << processes;
    }
  }
  // The check can fail: 2 hosts of 3 cores are not subtrees, and the two orders differ.
  const DeviceSpec odd = DeviceSpec::custom(6, kGiB, 2);
  const std::vector<std::vector<float>> v = {{1e8f}, {1.0f}, {-1e8f}, {1.0f}, {1.0f}, {1.0f}};
  EXPECT_NE(sum_by_processes(odd, 2, v), sum_by_processes(odd, 1, v));
}

TEST(DeviceSpecTest, EveryListedPresetResolves) {
  ASSERT_FALSE(DeviceSpec::preset_names().empty());
  for (const std::string& name : DeviceSpec::preset_names()) {
    const DeviceSpec s = DeviceSpec::preset(name);
    EXPECT_EQ(s.name, name);
    EXPECT_GE(s.cores, 1) << name;
    EXPECT_EQ(s.cores % s.hosts, 0) << name;
    s.validate();
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
