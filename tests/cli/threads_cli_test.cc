// --threads and KEEL_NUM_THREADS (issue 13): a run trained on 1, 2 or 3 threads writes bit-identical
// checkpoints — weights, optimizer state and every core's measured memory — whether the threads go to
// one replica's kernels (`cpu`) or to several replicas (v3-8); bad counts exit 2 naming the setting.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "framework/checkpoint/h5_file.h"
#include "tests/support/checkpoint_state.h"
#include "tests/support/cli_runner.h"

namespace keel::testing {
namespace {

using ::testing::HasSubstr;

class ThreadsCli : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("keel-threads"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Trains `args` for 5 steps with each thread count and expects the same checkpoint from all.
  void expect_same_with_threads(const std::string& args) {
    for (int threads : {1, 2, 3}) {
      const std::string run = dir_ + "/t" + std::to_string(threads);
      const CommandResult r = run_keel(args + " --quiet --stop-after-steps 5 --threads " + std::to_string(threads) +
                                       " --checkpoint-dir " + run);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      if (threads == 1) continue;
      expect_bit_identical(dir_ + "/t1/ckpt-5.h5", run + "/ckpt-5.h5");
      EXPECT_EQ(memory(dir_ + "/t1/ckpt-5.h5"), memory(run + "/ckpt-5.h5"));
    }
  }
  static nlohmann::json memory(const std::string& checkpoint) {
    return nlohmann::json::parse(H5File::open_read(checkpoint).read_string("keel/train_state"))["memory"]["per_core"];
  }
  std::string dir_;
};

// One replica: every thread works inside its convolutions, products and Adam update.
TEST_F(ThreadsCli, ResNet18OnOneCoreIsBitIdenticalOnOneTwoAndThreeThreads) {
  expect_same_with_threads("train --model resnet18 --device cpu --batch-per-core 16 --epochs 1 --seed 3");
}

// Eight replicas on fewer threads, and the MLP's Dense products on one replica.
TEST_F(ThreadsCli, MlpIsBitIdenticalOnOneTwoAndThreeThreads) {
  expect_same_with_threads("train --model mlp --device v3-8 --batch-per-core 16 --epochs 1 --seed 3");
  std::filesystem::remove_all(dir_);
  std::filesystem::create_directories(dir_);
  expect_same_with_threads("train --model mlp --device cpu --batch-per-core 128 --epochs 1 --seed 3");
}

TEST_F(ThreadsCli, BadThreadCountsExit2NamingTheSetting) {
  CommandResult r = run_keel("train --model mlp --device cpu --threads 0 --checkpoint-dir " + dir_ + "/a");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--threads '0' is not a thread count"));
  r = run_command("KEEL_NUM_THREADS=lots " KEEL_BINARY " train --model mlp --device cpu --checkpoint-dir " + dir_ + "/b");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("KEEL_NUM_THREADS 'lots' is not a thread count"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/b/latest"));
  r = run_command("KEEL_NUM_THREADS=2 " KEEL_BINARY " evaluate --threads 99999 " + dir_ + "/a");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--threads '99999'"));
  r = run_command("KEEL_CONV_BACKEND=fast " KEEL_BINARY " train --model mlp --device cpu --checkpoint-dir " + dir_ + "/c");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("KEEL_CONV_BACKEND must be onednn or im2col, got 'fast'"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/c/latest"));
}

}  // namespace
}  // namespace keel::testing
