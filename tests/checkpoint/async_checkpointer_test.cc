// AsyncCheckpointer: a save completes in the background; saves never overlap, a later one waits for
// the one in flight (next() hands out the one buffer only then); the destructor lets it finish; a
// writer's error is reported, never lost.
#include "framework/checkpoint/async_checkpointer.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/layers/core_layers.h"
#include "framework/layers/initializers.h"
#include "framework/train/losses.h"
#include "framework/train/optimizers.h"
#include "tests/support/checkpoint_state.h"
#include "tests/support/cli_runner.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

CheckpointSnapshot snapshot_of_step(int64_t step) {
  CheckpointSnapshot s;
  s.state.step = step;
  s.slots.push_back(SnapshotValue{"v", {2}, {1.0f, 2.0f}});
  return s;
}

// A writer that takes `duration`, records the steps it wrote in order and the most writes that ran
// at once.
struct SlowWriter {
  std::chrono::milliseconds duration;
  std::mutex mu;
  std::vector<int64_t> written;
  std::atomic<int> running{0};
  std::atomic<int> most_at_once{0};

  AsyncCheckpointer::Writer writer() {
    return [this](const CheckpointSnapshot& s) {
      const int now = ++running;
      int seen = most_at_once.load();
      while (now > seen && !most_at_once.compare_exchange_weak(seen, now)) {
      }
      std::this_thread::sleep_for(duration);
      --running;
      std::lock_guard<std::mutex> lock(mu);
      written.push_back(s.state.step);
    };
  }
  std::vector<int64_t> steps() {
    std::lock_guard<std::mutex> lock(mu);
    return written;
  }
};

TEST(AsyncCheckpointerTest, ASaveCompletesInTheBackground) {
  SlowWriter w{300ms};
  AsyncCheckpointer checkpointer(w.writer());
  const auto start = std::chrono::steady_clock::now();
  checkpointer.save(snapshot_of_step(7));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 200ms) << "save() returns before the write is done";
  EXPECT_TRUE(checkpointer.in_flight());
  checkpointer.wait();
  EXPECT_FALSE(checkpointer.in_flight());
  EXPECT_EQ(w.steps(), (std::vector<int64_t>{7}));
}

TEST(AsyncCheckpointerTest, ASaveWritesACheckpointIntoTheRunDirectory) {
  const std::string root = testing::make_temp_dir("keel-async-test");
  clear_session();
  set_random_seed(1);
  Sequential m({Dense(4, "relu", Shape{3}), Dense(2, "softmax")});
  m.compile(std::make_shared<Adam>(), std::make_shared<CategoricalCrossentropy>());
  m.train_step(Batch{testing::random_host({6, 3}, -1, 1, 7), testing::host({6, 2}, {1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1})});
  TrainState state;
  state.step = 1;
  const std::string synchronous = root + "/sync.h5";
  save_checkpoint(synchronous, m, m.optimizer(), state);
  RunDirectory dir(root + "/run");
  {
    AsyncCheckpointer checkpointer([&](const CheckpointSnapshot& s) { save_to_run_directory(dir, s, 3); });
    checkpointer.save(snapshot_checkpoint(m, m.optimizer(), state));
    checkpointer.wait();
  }
  ASSERT_EQ(dir.latest(), root + "/run/ckpt-1.h5");
  testing::expect_bit_identical(synchronous, root + "/run/ckpt-1.h5");
  std::filesystem::remove_all(root);
}

TEST(AsyncCheckpointerTest, TwoSavesNeverOverlapAndKeepTheirOrder) {
  SlowWriter w{80ms};
  AsyncCheckpointer checkpointer(w.writer());
  checkpointer.save(snapshot_of_step(1));
  checkpointer.save(snapshot_of_step(2));  // waits for step 1's write
  EXPECT_EQ(w.steps(), (std::vector<int64_t>{1})) << "the second save started only once the first was written";
  checkpointer.save(snapshot_of_step(3));
  checkpointer.wait();
  EXPECT_EQ(w.steps(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(w.most_at_once.load(), 1);
}

TEST(AsyncCheckpointerTest, NextHandsOutTheBufferOnlyOnceTheWriterIsDone) {
  std::atomic<bool> writing{false};
  std::atomic<bool> touched_while_writing{false};
  AsyncCheckpointer checkpointer([&](const CheckpointSnapshot&) {
    writing = true;
    std::this_thread::sleep_for(100ms);
    writing = false;
  });
  checkpointer.next() = snapshot_of_step(1);
  checkpointer.save();
  CheckpointSnapshot& buffer = checkpointer.next();  // waits for step 1's write
  touched_while_writing = writing.load();
  EXPECT_FALSE(touched_while_writing.load());
  EXPECT_EQ(buffer.state.step, 1) << "the same buffer, for the caller to refill";
  checkpointer.save();
  EXPECT_THROW(checkpointer.save(), std::logic_error) << "save() again without next() while one is in flight";
}

TEST(AsyncCheckpointerTest, TheDestructorLetsTheSaveInFlightFinish) {
  SlowWriter w{150ms};
  {
    AsyncCheckpointer checkpointer(w.writer());
    checkpointer.save(snapshot_of_step(4));
  }
  EXPECT_EQ(w.steps(), (std::vector<int64_t>{4}));
}

TEST(AsyncCheckpointerTest, AWritersErrorIsRethrownOnceByTheNextCall) {
  std::atomic<int> writes{0};
  AsyncCheckpointer checkpointer([&](const CheckpointSnapshot& s) {
    ++writes;
    if (s.state.step == 1) throw CheckpointError("disk full writing ckpt-1.h5");
  });
  checkpointer.save(snapshot_of_step(1));
  try {
    checkpointer.wait();
    ADD_FAILURE() << "the failed save was not reported";
  } catch (const CheckpointError& e) {
    EXPECT_THAT(e.what(), HasSubstr("disk full"));
  }
  EXPECT_NO_THROW(checkpointer.wait()) << "reported once";
  // A save after a failed one reports it and writes nothing.
  checkpointer.save(snapshot_of_step(1));
  std::this_thread::sleep_for(50ms);
  EXPECT_THROW(checkpointer.save(snapshot_of_step(2)), CheckpointError);
  checkpointer.wait();
  EXPECT_EQ(writes.load(), 2);
  checkpointer.save(snapshot_of_step(3));
  EXPECT_NO_THROW(checkpointer.wait());
  EXPECT_EQ(writes.load(), 3);
}

TEST(AsyncCheckpointerTest, AnErrorNobodyCollectedIsPrintedByTheDestructor) {
  ::testing::internal::CaptureStderr();
  {
    AsyncCheckpointer checkpointer([](const CheckpointSnapshot&) { throw CheckpointError("cannot rename ckpt-5.h5"); });
    checkpointer.save(snapshot_of_step(5));
  }
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("keel: an asynchronous checkpoint save failed: cannot rename ckpt-5.h5"));
}

}  // namespace
}  // namespace keel
