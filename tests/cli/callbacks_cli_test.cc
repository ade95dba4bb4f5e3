// `keel train`'s validation and Keras callbacks end to end: history.csv, EarlyStopping and
// ReduceLROnPlateau, and a resumed run that writes the same history and weights as a straight one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "tests/support/checkpoint_state.h"
#include "tests/support/cli_runner.h"

namespace keel::testing {
namespace {

using ::testing::HasSubstr;

class CallbacksCli : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("keel-callbacks"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string latest(const std::string& run) {
    std::string name = read_file(run + "/latest");
    while (!name.empty() && name.back() == '\n') name.pop_back();
    return run + "/" + name;
  }
  std::string dir_;
};

// 54,000 training examples (--validation-split 0.1) in batches of 512: 105 steps an epoch.
// A high learning rate makes the validation loss stall now and then: ReduceLROnPlateau halves the
// rate after epochs 4, 6, 8, ... and EarlyStopping ends the run after epoch 14 (step 1470) of 20.
const std::string kRun =
    "--model mlp --dataset fashion_mnist --device cpu --batch-per-core 512 --seed 1 --lr 0.02 --validation-split 0.1 "
    "--early-stopping-patience 2 --reduce-lr-patience 0 --reduce-lr-factor 0.5 --epochs 20 ";

TEST_F(CallbacksCli, HistoryCsvHasKerasColumnsAndOneRowPerEpoch) {
  CommandResult r = run_keel("train --model mlp --device cpu --batch-per-core 512 --validation-data test --epochs 2 "
                             "--quiet --checkpoint-dir " + dir_ + "/run");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string csv = read_file(dir_ + "/run/history.csv");
  EXPECT_EQ(csv.substr(0, csv.find('\n')), "epoch,accuracy,loss,val_accuracy,val_loss");
  EXPECT_THAT(csv, HasSubstr("\n0,"));
  EXPECT_THAT(csv, HasSubstr("\n1,"));
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 3);
}

TEST_F(CallbacksCli, AResumedRunWritesTheSameHistoryAndWeightsAsAStraightOne) {
  CommandResult a = run_keel("train " + kRun + "--checkpoint-dir " + dir_ + "/straight");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const std::string history = read_file(dir_ + "/straight/history.csv");
  // The callbacks acted: the run stopped early, after the rate was lowered.
  EXPECT_THAT(a.out, HasSubstr("Epoch 14: early stopping (step 1470)")) << history;
  EXPECT_THAT(a.out, HasSubstr("Epoch 4: ReduceLROnPlateau reducing learning rate to 0.01.")) << history;
  EXPECT_THAT(a.out, HasSubstr("Epoch 6: ReduceLROnPlateau reducing learning rate to 0.005.")) << history;

  // Stopped at epoch boundaries (steps 420, then 735), and in the middle of epochs (450, then 950).
  for (const auto& [name, stops] : std::vector<std::pair<std::string, std::vector<int>>>{
           {"boundary", {420, 315}}, {"mid", {450, 500}}}) {
    const std::string run = dir_ + "/" + name;
    CommandResult first = run_keel("train " + kRun + "--quiet --stop-after-steps " + std::to_string(stops[0]) +
                                   " --checkpoint-dir " + run);
    ASSERT_EQ(first.exit_code, 0) << first.err;
    CommandResult second = run_keel("resume " + run + " --quiet --stop-after-steps " + std::to_string(stops[1]));
    ASSERT_EQ(second.exit_code, 0) << second.err;
    CommandResult rest = run_keel("resume " + run + " --quiet");
    ASSERT_EQ(rest.exit_code, 0) << rest.err;
    EXPECT_EQ(read_file(run + "/history.csv"), history) << name;
    EXPECT_EQ(read_file(run + "/latest"), read_file(dir_ + "/straight/latest")) << name;
    expect_bit_identical(latest(dir_ + "/straight"), latest(run));
    // Finished by EarlyStopping: a further resume has nothing to do.
    CommandResult again = run_keel("resume " + run + " --quiet");
    EXPECT_EQ(again.exit_code, 0);
    EXPECT_THAT(again.out, HasSubstr("nothing to do"));
  }
}

TEST_F(CallbacksCli, CallbacksThatWatchValidationNeedIt) {
  CommandResult r = run_keel("train --model mlp --device cpu --early-stopping-patience 1 --checkpoint-dir " + dir_ + "/x");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--validation-split"));
}

}  // namespace
}  // namespace keel::testing
