// ModelCheckpoint: Keras's save_best_only, monitor and mode; the file is a whole, verified checkpoint,
// replaced atomically; its best survives a resume (get_state/set_state).
#include "framework/checkpoint/model_checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "framework/layers/core_layers.h"
#include "framework/train/losses.h"
#include "framework/train/optimizers.h"
#include "tests/support/cli_runner.h"

namespace keel {
namespace {

namespace fs = std::filesystem;

ModelCheckpoint::Options best_only(std::string monitor = "val_loss", std::string mode = "auto") {
  ModelCheckpoint::Options o;
  o.monitor = std::move(monitor);
  o.mode = std::move(mode);
  o.save_best_only = true;
  return o;
}

class ModelCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::make_temp_dir("keel-model-checkpoint");
    clear_session();
    model_ = std::make_unique<Sequential>(std::vector<LayerPtr>{Dense(2, "softmax", Shape{2})});
    model_->compile(std::make_shared<SGD>(), std::make_shared<CategoricalCrossentropy>());
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Feeds `values` of `monitor` as epochs 0, 1, ...; returns the epochs (0-based) after which the
  // file was written, told apart by a weight set to the epoch before each epoch's end.
  std::vector<int> feed(ModelCheckpoint& cb, const std::string& monitor, const std::vector<double>& values, int first = 0) {
    TrainingState st;
    st.model = model_.get();
    st.epochs = 100;
    if (first == 0) cb.on_train_begin(st);
    std::vector<int> saved;
    for (size_t i = 0; i < values.size(); ++i) {
      st.epoch = first + static_cast<int>(i);
      model_->variables()[1]->mutable_value().data()[0] = static_cast<float>(st.epoch);  // the bias
      cb.on_epoch_end(st, {{"loss", 1.0}, {monitor, values[i]}});
      if (fs::exists(path())) {
        const TrainState state = read_train_state(path());
        if (saved.empty() || saved.back() != state.epoch - 1) saved.push_back(state.epoch - 1);
      }
    }
    return saved;
  }
  std::string path() const { return dir_ + "/best.h5"; }
  std::string dir_;
  std::unique_ptr<Sequential> model_;
};

TEST_F(ModelCheckpointTest, SaveBestOnlyWritesOnlyEpochsThatImprove) {
  ModelCheckpoint cb(path(), best_only(), nullptr);  // monitor val_loss, mode auto: min
  EXPECT_EQ(feed(cb, "val_loss", {0.5, 0.6, 0.4, 0.4, 0.3}), (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(cb.best(), 0.3);
  EXPECT_EQ(read_train_state(path()).epoch, 5);
  verify_checkpoint(path());  // a whole checkpoint
}

TEST_F(ModelCheckpointTest, AccuracyIsMaximisedAndModeOverridesIt) {
  ModelCheckpoint acc(path(), best_only("val_accuracy"), nullptr);
  EXPECT_EQ(feed(acc, "val_accuracy", {0.5, 0.4, 0.7}), (std::vector<int>{0, 2}));
  fs::remove(path());
  ModelCheckpoint min(path(), best_only("val_accuracy", "min"), nullptr);
  EXPECT_EQ(feed(min, "val_accuracy", {0.5, 0.4, 0.7}), (std::vector<int>{0, 1}));
}

TEST_F(ModelCheckpointTest, InitialValueThresholdMustBeBeaten) {
  ModelCheckpoint::Options o = best_only();
  o.initial_value_threshold = 0.45;
  ModelCheckpoint cb(path(), o, nullptr);
  EXPECT_EQ(feed(cb, "val_loss", {0.5, 0.46, 0.44}), (std::vector<int>{2}));
}

TEST_F(ModelCheckpointTest, AMissingMonitorSavesNothing) {
  ModelCheckpoint cb(path(), best_only("val_auc"), nullptr);
  EXPECT_TRUE(feed(cb, "val_loss", {0.5, 0.4}).empty());
  EXPECT_FALSE(fs::exists(path()));
}

TEST_F(ModelCheckpointTest, WithoutSaveBestOnlyEveryEpochIsWrittenToItsName) {
  ModelCheckpoint cb(dir_ + "/new/weights-{epoch}.h5", {}, nullptr);  // the directory is made
  feed(cb, "val_loss", {0.5, 0.6});
  EXPECT_EQ(read_train_state(dir_ + "/new/weights-1.h5").epoch, 1);
  EXPECT_EQ(read_train_state(dir_ + "/new/weights-2.h5").epoch, 2);
}

TEST_F(ModelCheckpointTest, TheBestSurvivesAResume) {
  ModelCheckpoint first(path(), best_only(), nullptr);
  feed(first, "val_loss", {0.5, 0.3});
  ModelCheckpoint resumed(path(), best_only(), nullptr);
  resumed.set_state(first.get_state());
  TrainingState st;
  resumed.on_train_begin(st);
  EXPECT_EQ(resumed.best(), 0.3);
  // 0.4 beats nothing a straight run had: best.h5 still holds epoch 1.
  EXPECT_TRUE(feed(resumed, "val_loss", {0.4}, /*first=*/2) == std::vector<int>{1});
  EXPECT_EQ(read_train_state(path()).epoch, 2);
  ModelCheckpoint fresh(path(), best_only(), nullptr);
  fresh.set_state({{"best", nullptr}});
  EXPECT_EQ(fresh.best(), std::nullopt);
}

}  // namespace
}  // namespace keel
