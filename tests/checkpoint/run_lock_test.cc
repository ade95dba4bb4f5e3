// One writer per run directory (framework/checkpoint/run_lock.h): a second taker is refused naming
// the holder; the kernel releases the lock of a process that dies, however it dies.
#include "framework/checkpoint/run_lock.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

namespace keel {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class RunLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    run_ = fs::temp_directory_path() / ("keel_run_lock_test_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(run_);
  }
  void TearDown() override { fs::remove_all(run_); }
  fs::path run_;
};

TEST_F(RunLockTest, ASecondTakerIsRefusedNamingTheHolder) {
  std::optional<RunLock> first(RunLock::acquire(run_.string()));
  EXPECT_TRUE(fs::is_directory(run_));
  try {
    RunLock::acquire(run_.string());
    ADD_FAILURE() << "took a held lock";
  } catch (const RunLockedError& e) {
    EXPECT_THAT(e.what(), HasSubstr("pid " + std::to_string(::getpid())));
    EXPECT_THAT(e.what(), HasSubstr(run_.string()));
  }
  first.reset();
  EXPECT_NO_THROW(RunLock::acquire(run_.string()));
}

TEST_F(RunLockTest, TakingTheLockRemovesStaleTemporariesOnly) {
  fs::create_directories(run_);
  for (const char* name : {".ckpt-200.h5.tmp-1234", ".latest.tmp-99", "ckpt-100.h5", "latest"}) {
    std::ofstream(run_ / name) << "x";
  }
  const RunLock lock = RunLock::acquire(run_.string());
  EXPECT_FALSE(fs::exists(run_ / ".ckpt-200.h5.tmp-1234"));
  EXPECT_FALSE(fs::exists(run_ / ".latest.tmp-99"));
  EXPECT_TRUE(fs::exists(run_ / "ckpt-100.h5"));
  EXPECT_TRUE(fs::exists(run_ / "latest"));
}

TEST_F(RunLockTest, ALockHeldByAKilledProcessDoesNotBlock) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const RunLock lock = RunLock::acquire(run_.string());
    const char c = 'x';
    (void)!::write(ready[1], &c, 1);
    ::pause();
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  EXPECT_THROW(RunLock::acquire(run_.string()), RunLockedError);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_NO_THROW(RunLock::acquire(run_.string()));
  ::close(ready[0]);
  ::close(ready[1]);
}

}  // namespace
}  // namespace keel
