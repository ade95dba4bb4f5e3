// host_threads(): the machine's hardware threads, or under mpirun this process's share of them, never
// more than the CPUs the process may run on; and
// what AUTOTUNE takes from it (threads) and does not (interleave's cycle length).
#include "framework/core/host_threads.h"

#include <gtest/gtest.h>
#include <sched.h>

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

// The CPUs this test process may run on, read independently of keel.
int cpus_in_mask() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  return sched_getaffinity(0, sizeof mask, &mask) == 0 ? CPU_COUNT(&mask) : hardware();
}

TEST(HostThreadsTest, OneProcessUsesEveryHardwareThreadItMayRunOn) {
  EXPECT_EQ(allowed_cpus(), cpus_in_mask());
  const LocalProcesses none(nullptr);
  EXPECT_EQ(host_threads(), std::min(hardware(), cpus_in_mask()));
  const LocalProcesses one("1");
  EXPECT_EQ(host_threads(), std::min(hardware(), cpus_in_mask()));
}

TEST(HostThreadsTest, UnderMpirunEachProcessTakesItsShareAndAtLeastOne) {
  const LocalProcesses two("2");
  EXPECT_EQ(host_threads(), std::min(std::max(1, hardware() / 2), cpus_in_mask()));
  const LocalProcesses many("100000");
  EXPECT_EQ(host_threads(), 1);
}

// Runs fn on a thread allowed one CPU only (as `taskset -c N`, or mpirun binding a process to a core),
// where this machine lets the test narrow its mask; false where it cannot.
template <class Fn>
bool on_one_cpu(Fn fn) {
  bool ran = false;
  std::thread([&] {
    cpu_set_t mask;
    CPU_ZERO(&mask);
    if (sched_getaffinity(0, sizeof mask, &mask) != 0) return;
    int first = 0;
    while (first < CPU_SETSIZE && !CPU_ISSET(first, &mask)) ++first;
    CPU_ZERO(&mask);
    CPU_SET(first, &mask);
    if (sched_setaffinity(0, sizeof mask, &mask) != 0) return;
    fn();
    ran = true;
  }).join();
  return ran;
}

// A process limited to fewer CPUs than the machine has (taskset, a container's cpuset, mpirun's
// binding) starts no more compute threads than it may run on.
TEST(HostThreadsTest, NeverMoreThreadsThanTheCpusTheProcessMayRunOn) {
  if (cpus_in_mask() < 2) GTEST_SKIP() << "one CPU: nothing to narrow";
  const LocalProcesses none(nullptr);
  const bool ran = on_one_cpu([] {
    EXPECT_EQ(allowed_cpus(), 1);
    EXPECT_EQ(machine_threads(), 1);
    EXPECT_EQ(host_threads(), 1);
    EXPECT_EQ(cpu_binding_note(), "");  // outside mpirun: the user's own choice, nothing to say
  });
  ASSERT_TRUE(ran) << "could not narrow the test thread's CPU mask";
}

// Under mpirun, a process bound to fewer CPUs than its share is told so, with the option that gives
// it its share; one that has its share is told nothing.
TEST(HostThreadsTest, UnderMpirunABindingNarrowerThanTheShareIsNamed) {
  if (cpus_in_mask() < 2 || cpus_in_mask() < hardware()) GTEST_SKIP() << "needs every CPU of a machine of two or more";
  const LocalProcesses one("1");
  EXPECT_EQ(cpu_binding_note(), "");
  const bool ran = on_one_cpu([] {
    const std::string note = cpu_binding_note();
    EXPECT_NE(note.find("bound this process to 1 of this machine's " + std::to_string(hardware()) + " CPUs"), std::string::npos)
        << note;
    EXPECT_NE(note.find("`mpirun --bind-to none`"), std::string::npos) << note;
  });
  ASSERT_TRUE(ran);
  const LocalProcesses all(std::to_string(hardware()).c_str());  // a share of one CPU: one is enough
  EXPECT_TRUE(on_one_cpu([] { EXPECT_EQ(cpu_binding_note(), ""); }));
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
