// host_threads(): the machine's hardware threads, or under mpirun this process's share of them; and
// what AUTOTUNE takes from it (threads) and does not (interleave's cycle length).
#include "framework/core/host_threads.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include "framework/data/dataset_node.h"

namespace keel {
namespace {

// Sets OMPI_COMM_WORLD_LOCAL_SIZE for one test, restoring what was there.
class LocalProcesses {
 public:
  explicit LocalProcesses(const char* value) {
    if (const char* old = std::getenv(kName)) saved_ = old, had_ = true;
    if (value != nullptr) setenv(kName, value, 1); else unsetenv(kName);
  }
  ~LocalProcesses() {
    if (had_) setenv(kName, saved_.c_str(), 1); else unsetenv(kName);
  }

 private:
  static constexpr const char* kName = "OMPI_COMM_WORLD_LOCAL_SIZE";
  std::string saved_;
  bool had_ = false;
};

int hardware() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

TEST(HostThreadsTest, OneProcessUsesEveryHardwareThread) {
  const LocalProcesses none(nullptr);
  EXPECT_EQ(host_threads(), hardware());
  const LocalProcesses one("1");
  EXPECT_EQ(host_threads(), hardware());
}

TEST(HostThreadsTest, UnderMpirunEachProcessTakesItsShareAndAtLeastOne) {
  const LocalProcesses two("2");
  EXPECT_EQ(host_threads(), std::max(1, hardware() / 2));
  const LocalProcesses many("100000");
  EXPECT_EQ(host_threads(), 1);
}

// interleave's AUTOTUNE cycle length orders elements: it must not follow the process count, or a
// run under mpirun would read another order than one process.
TEST(HostThreadsTest, InterleaveCycleLengthIgnoresTheProcessCount) {
  const LocalProcesses many("100000");
  EXPECT_EQ(autotune_cycle_length(), hardware());
  EXPECT_EQ(autotune_threads(), 1);
}

}  // namespace
}  // namespace keel
