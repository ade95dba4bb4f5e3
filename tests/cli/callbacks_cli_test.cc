// `keel train`'s validation and Keras callbacks end to end: history.csv, EarlyStopping and
// ReduceLROnPlateau, and a resumed run that writes the same history and weights as a straight one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/checkpoint_state.h"
#include "tests/support/cli_runner.h"
#include "framework/checkpoint/checkpoint.h"

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
const std::string kCallbacksRun =
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
  CommandResult a = run_keel("train " + kCallbacksRun + "--checkpoint-dir " + dir_ + "/straight");
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
    CommandResult first = run_keel("train " + kCallbacksRun + "--quiet --stop-after-steps " + std::to_string(stops[0]) +
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

// Every callback at once, on the test split: EarlyStopping on val_accuracy (patience 1) stops the run
// an epoch after its best and restores the best epoch's weights; ModelCheckpoint keeps the lowest
// val_loss in best.h5; ReduceLROnPlateau (patience 0) halves the rate after each epoch whose val_loss
// did not improve by 1e-4; TensorBoard logs every epoch. Which epochs those are follows the run's
// floating-point trajectory, which moves with the CPU keel is built for (-march=native): the tests
// read them off the straight run (on the machines of 2026-11-26, 8 epochs, the best the 7th).
// 60,000 training examples in batches of 512: 118 steps an epoch.
constexpr int kEveryCallbackStepsPerEpoch = 118;
const std::string kEveryCallback =
    "--model mlp --dataset fashion_mnist --device cpu --batch-per-core 512 --seed 40 --lr 0.02 --validation-data test "
    "--early-stopping-patience 1 --early-stopping-monitor val_accuracy --restore-best-weights --reduce-lr-patience 0 "
    "--reduce-lr-factor 0.5 --save-best-only --tensorboard --metrics top_k_categorical_accuracy --epochs 12 --quiet ";

// The events of a run's logs/, read by tests/datasets/read_tensorboard_events.py (Python's protobuf).
nlohmann::json read_events(const std::string& log_dir) {
  CommandResult r = run_command("/usr/bin/python3 " + std::string(KEEL_TESTS_DIR) + "/datasets/read_tensorboard_events.py " +
                                std::string(KEEL_SOURCE_DIR) + "/datasets " + log_dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

// Each epoch's scalars (step -> tag -> value), failing on an epoch written twice.
std::map<int64_t, nlohmann::json> scalars_by_epoch(const nlohmann::json& events) {
  std::map<int64_t, nlohmann::json> out;
  for (const auto& e : events) {
    if (!e["file_version"].is_null()) continue;
    EXPECT_TRUE(out.emplace(e["step"].get<int64_t>(), e["scalars"]).second) << "epoch " << e["step"] << " written twice";
  }
  return out;
}

TEST_F(CallbacksCli, AResumedRunWithEveryCallbackEndsAsAStraightOne) {
  CommandResult a = run_keel("train " + kEveryCallback + "--checkpoint-dir " + dir_ + "/straight");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const std::string straight = dir_ + "/straight";
  const std::string history = read_file(straight + "/history.csv");
  const int epochs = static_cast<int>(std::count(history.begin(), history.end(), '\n')) - 1;  // less the header
  // EarlyStopping ended the run, after a best epoch that is not the last: restoring it matters.
  ASSERT_GE(epochs, 3) << history;
  ASSERT_LT(epochs, 12) << history;
  const int64_t best_epoch = read_train_state(latest(straight)).callbacks["EarlyStopping"]["best_epoch"].get<int64_t>();
  ASSERT_LT(best_epoch, epochs - 1) << history;
  const std::string run = dir_ + "/resumed";
  // Stopped inside the second epoch, then inside the last one, after the best epoch whose weights
  // must come back.
  const int first_stop = kEveryCallbackStepsPerEpoch + 50;
  const int second_stop = (epochs - 1) * kEveryCallbackStepsPerEpoch + 20 - first_stop;
  CommandResult first = run_keel("train " + kEveryCallback + "--stop-after-steps " + std::to_string(first_stop) +
                                 " --checkpoint-dir " + run);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  CommandResult second = run_keel("resume " + run + " --quiet --stop-after-steps " + std::to_string(second_stop));
  ASSERT_EQ(second.exit_code, 0) << second.err;
  CommandResult rest = run_keel("resume " + run + " --quiet");
  ASSERT_EQ(rest.exit_code, 0) << rest.err;

  EXPECT_EQ(read_file(run + "/history.csv"), history);
  EXPECT_EQ(read_file(run + "/latest"), read_file(straight + "/latest"));
  expect_bit_identical(latest(straight), latest(run));
  expect_bit_identical(straight + "/best.h5", run + "/best.h5");
  EXPECT_EQ(read_train_state(run + "/best.h5").epoch, read_train_state(straight + "/best.h5").epoch);
  // The final weights are EarlyStopping's best epoch's, not the last one's.
  EXPECT_EQ(read_train_state(latest(run)).callbacks["EarlyStopping"]["best_epoch"], best_epoch);

  // TensorBoard: three files in each directory, every epoch once, the same scalars as the straight run.
  const nlohmann::json straight_events = read_events(straight + "/logs"), resumed_events = read_events(run + "/logs");
  for (const char* name : {"train", "validation"}) {
    std::map<std::string, int> files;
    for (const auto& e : resumed_events[name]) ++files[e["file"].get<std::string>()];
    EXPECT_EQ(files.size(), 3u) << name;
    const auto a_epochs = scalars_by_epoch(straight_events[name]), b_epochs = scalars_by_epoch(resumed_events[name]);
    EXPECT_EQ(a_epochs.size(), static_cast<size_t>(epochs)) << name;
    EXPECT_EQ(b_epochs, a_epochs) << name;
  }
}

TEST_F(CallbacksCli, TensorBoardEventsReadBackValueForValue) {
  CommandResult r = run_keel("train " + kEveryCallback + "--checkpoint-dir " + dir_ + "/run");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json events = read_events(dir_ + "/run/logs");
  // history.csv's rows, by column.
  std::vector<std::map<std::string, double>> rows;
  std::istringstream csv(read_file(dir_ + "/run/history.csv"));
  std::string line;
  std::getline(csv, line);
  ASSERT_EQ(line, "epoch,accuracy,loss,top_k_categorical_accuracy,val_accuracy,val_loss,val_top_k_categorical_accuracy");
  std::vector<std::string> columns;
  std::istringstream header(line);
  for (std::string c; std::getline(header, c, ',');) columns.push_back(c);
  while (std::getline(csv, line)) {
    std::map<std::string, double> row;
    std::istringstream fields(line);
    size_t i = 0;
    for (std::string f; std::getline(fields, f, ',');) row[columns.at(i++)] = std::stod(f);
    rows.push_back(row);
  }
  std::vector<float> learning_rates;
  float rate = 0.02f;
  double best_val_loss = std::numeric_limits<double>::infinity();
  for (const auto& row : rows) {
    if (row.at("val_loss") < best_val_loss - 1e-4) {
      best_val_loss = row.at("val_loss");
    } else {
      rate *= 0.5f;
    }
    learning_rates.push_back(rate);
  }
  EXPECT_LT(learning_rates.back(), 0.02f) << "ReduceLROnPlateau never acted";
  const TrainState final_state = read_train_state(latest(dir_ + "/run"));
  const nlohmann::json& core0 = final_state.memory["per_core"][0];
  for (const char* name : {"train", "validation"}) {
    const nlohmann::json& list = events[name];
    ASSERT_GE(rows.size(), 3u);
    ASSERT_EQ(list.size(), rows.size() + 1) << name;  // file_version, then one event per epoch
    EXPECT_EQ(list[0]["file_version"], "brain.Event:2");
    EXPECT_EQ(list[0]["step"], 0);
    EXPECT_GT(list[0]["wall_time"].get<double>(), 1.7e9);
    EXPECT_THAT(list[0]["file"].get<std::string>(), ::testing::StartsWith("events.out.tfevents."));
    for (size_t epoch = 0; epoch < rows.size(); ++epoch) {
      const nlohmann::json& e = list[epoch + 1];
      EXPECT_EQ(e["step"], epoch);
      EXPECT_GE(e["wall_time"].get<double>(), list[epoch]["wall_time"].get<double>());
      const nlohmann::json& s = e["scalars"];
      const bool val = std::string(name) == "validation";
      const std::string prefix = val ? "val_" : "";
      for (const char* metric : {"accuracy", "loss", "top_k_categorical_accuracy"}) {
        EXPECT_EQ(s["epoch_" + std::string(metric)].get<double>(), static_cast<float>(rows[epoch].at(prefix + metric)))
            << name << " " << metric << " " << epoch;
      }
      if (val) {
        EXPECT_EQ(s.size(), 3u);
        continue;
      }
      // The rate the next epoch trains with: halved by ReduceLROnPlateau after each epoch whose
      // val_loss did not improve on the best so far by min_delta (Keras's 1e-4).
      EXPECT_EQ(s["epoch_learning_rate"].get<double>(), learning_rates.at(epoch)) << epoch;
      for (const char* category : {"parameters", "gradients", "optimizer", "activations", "inputs", "workspace"}) {
        const std::string tag = std::string("epoch_hbm_peak_bytes/core_0/") + category;
        ASSERT_TRUE(s.contains(tag)) << tag;
        EXPECT_GT(s[tag].get<double>(), 0.0) << tag;
        // The ledger's high-water marks do not move after the first epoch: the last ones are those
        // the checkpoint recorded (tools/cli/memory_report.h).
        if (epoch + 1 == rows.size()) {
          EXPECT_EQ(s[tag].get<double>(), static_cast<float>(core0[category].get<double>())) << tag;
        }
      }
      EXPECT_EQ(s["epoch_hbm_peak_bytes/core_0/total"].get<double>(), static_cast<float>(core0["peak"].get<double>()));
    }
  }
}

TEST_F(CallbacksCli, BestCheckpointIsOutsideTheRollingSetAndEvaluates) {
  const std::string run = dir_ + "/run";
  CommandResult r = run_keel("train --model mlp --device cpu --batch-per-core 512 --validation-data test --epochs 3 --keep 1 "
                             "--save-best-only --checkpoint-monitor val_accuracy --checkpoint-dir " + run);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Epoch 1: val_accuracy improved from -inf to "));
  EXPECT_TRUE(std::filesystem::exists(run + "/best.h5"));
  EXPECT_EQ(read_file(run + "/latest"), "ckpt-351.h5\n");  // --keep 1 pruned the others, never best.h5
  // best.h5 is a whole checkpoint: evaluated on the validation split, it gives the best val_accuracy.
  CommandResult e = run_keel("evaluate " + run + "/best.h5 --split test --json");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const double accuracy = nlohmann::json::parse(e.out)["accuracy"].get<double>();
  double best = 0.0;
  std::istringstream csv(read_file(run + "/history.csv"));
  std::string line;
  std::getline(csv, line);
  while (std::getline(csv, line)) best = std::max(best, std::stod(line.substr(line.rfind(',', line.rfind(',') - 1) + 1)));
  EXPECT_EQ(accuracy, best);
  // resume never picks it: the run goes on from ckpt-351.
  CommandResult more = run_keel("resume " + run + " --epochs 4 --quiet");
  ASSERT_EQ(more.exit_code, 0) << more.err;
  EXPECT_THAT(more.out, HasSubstr("Resuming " + run + "/ckpt-351.h5"));
}

TEST_F(CallbacksCli, OverwriteMovesHistoryLogsAndBestAside) {
  const std::string run = dir_ + "/run";
  const std::string args = "train --model mlp --device cpu --batch-per-core 512 --validation-data test --epochs 1 --quiet "
                           "--save-best-only --tensorboard --checkpoint-dir " + run;
  ASSERT_EQ(run_keel(args).exit_code, 0);
  const std::string history = read_file(run + "/history.csv");
  CommandResult again = run_keel(args + " --overwrite");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  for (const char* name : {"history.csv", "best.h5", "logs/train", "logs/validation", "ckpt-117.h5"}) {
    EXPECT_TRUE(std::filesystem::exists(run + "/replaced-1/" + name)) << name;
    EXPECT_TRUE(std::filesystem::exists(run + "/" + name)) << name;
  }
  EXPECT_EQ(read_file(run + "/replaced-1/history.csv"), history);
  // The new run's logs hold its own epoch only.
  const nlohmann::json events = read_events(run + "/logs");
  EXPECT_EQ(scalars_by_epoch(events["train"]).size(), 1u);
}

TEST_F(CallbacksCli, MetricsByKerasNameReachEvaluateAndAreCheckedAgainstTheLoss) {
  const std::string run = dir_ + "/run";
  CommandResult r = run_keel("train --model mlp --device cpu --batch-per-core 512 --epochs 1 --quiet "
                             "--metrics top_k_categorical_accuracy --checkpoint-dir " + run);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  CommandResult e = run_keel("evaluate " + run + " --json");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const nlohmann::json j = nlohmann::json::parse(e.out);
  EXPECT_GT(j["top_k_categorical_accuracy"].get<double>(), j["accuracy"].get<double>());
  EXPECT_LE(j["top_k_categorical_accuracy"].get<double>(), 1.0);
  CommandResult text = run_keel("evaluate " + run);
  EXPECT_THAT(text.out, HasSubstr(" - top_k_categorical_accuracy 0."));

  CommandResult wrong = run_keel("train --model mlp --device cpu --metrics sparse_top_k_categorical_accuracy "
                                 "--checkpoint-dir " + dir_ + "/x");
  EXPECT_EQ(wrong.exit_code, 2);
  EXPECT_THAT(wrong.err, HasSubstr("use top_k_categorical_accuracy"));
  CommandResult unknown = run_keel("train --model mlp --device cpu --metrics auc --checkpoint-dir " + dir_ + "/x");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("unknown metric 'auc'"));
}

TEST_F(CallbacksCli, CallbacksThatWatchValidationNeedIt) {
  CommandResult r = run_keel("train --model mlp --device cpu --early-stopping-patience 1 --checkpoint-dir " + dir_ + "/x");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--validation-split"));
}

}  // namespace
}  // namespace keel::testing
