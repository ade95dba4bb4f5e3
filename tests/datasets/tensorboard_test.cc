// TensorBoard: event files by TensorFlow's names and layout, read back; a new callback (a resumed run)
// writes new files and never an epoch the directory already holds.
#include "datasets/tensorboard.h"

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

class TensorBoardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::make_temp_dir("keel-tensorboard");
    clear_session();
    model_ = std::make_unique<Sequential>(std::vector<LayerPtr>{Dense(2, "softmax", Shape{2})});
    model_->compile(std::make_shared<SGD>(SGD::Options{.learning_rate = 0.25f}), std::make_shared<CategoricalCrossentropy>());
  }
  void TearDown() override { fs::remove_all(dir_); }
  void run_epochs(int first, int last) {
    TensorBoard tb(dir_ + "/logs");
    TrainingState st;
    st.model = model_.get();
    tb.on_train_begin(st);
    for (int epoch = first; epoch <= last; ++epoch) {
      st.epoch = epoch;
      tb.on_epoch_end(st, {{"loss", 1.0 / (epoch + 1)}, {"accuracy", 0.5}, {"val_loss", 2.0 * epoch}});
    }
    tb.on_train_end(st);
  }
  size_t files(const std::string& run) const {
    size_t n = 0;
    for (const auto& entry : fs::directory_iterator(dir_ + "/logs/" + run)) {
      EXPECT_THAT(entry.path().filename().string(), ::testing::MatchesRegex("events\\.out\\.tfevents\\.[0-9]+\\..+\\.[0-9]+\\.[0-9]+\\.v2"));
      ++n;
    }
    return n;
  }
  std::string dir_;
  std::unique_ptr<Sequential> model_;
};

TEST_F(TensorBoardTest, EachFileStartsWithItsVersionThenOneEventPerEpoch) {
  run_epochs(0, 1);
  const std::vector<EventScalars> train = read_event_files(dir_ + "/logs/train");
  ASSERT_EQ(train.size(), 3u);
  EXPECT_EQ(train[0].file_version, "brain.Event:2");
  EXPECT_TRUE(train[0].scalars.empty());
  EXPECT_EQ(train[2].step, 1);
  EXPECT_GE(train[2].wall_time, train[1].wall_time);
  const auto& s = train[2].scalars;
  auto value = [&](const std::string& tag) {
    for (const auto& [t, v] : s) {
      if (t == tag) return v;
    }
    ADD_FAILURE() << "no " << tag;
    return -1.0f;
  };
  EXPECT_EQ(value("epoch_loss"), 0.5f);
  EXPECT_EQ(value("epoch_accuracy"), 0.5f);
  EXPECT_EQ(value("epoch_learning_rate"), 0.25f);
  EXPECT_EQ(value("epoch_hbm_peak_bytes/core_0/parameters"), static_cast<float>(model_->strategy().ledger().core(0).stat(Category::parameters).peak));
  EXPECT_GT(value("epoch_hbm_peak_bytes/core_0/parameters"), 0.0f);
  const std::vector<EventScalars> validation = read_event_files(dir_ + "/logs/validation");
  ASSERT_EQ(validation.size(), 3u);
  ASSERT_EQ(validation[2].scalars.size(), 1u);
  EXPECT_EQ(validation[2].scalars[0], (std::pair<std::string, float>("epoch_loss", 2.0f)));
}

TEST_F(TensorBoardTest, AResumeAppendsANewFileAndSkipsEpochsAlreadyWritten) {
  run_epochs(0, 2);
  // A run that wrote epoch 2 but stopped before its checkpoint resumes at epoch 2.
  run_epochs(2, 3);
  EXPECT_EQ(files("train"), 2u);
  std::vector<int64_t> steps;
  for (const EventScalars& e : read_event_files(dir_ + "/logs/train")) {
    if (!e.scalars.empty()) steps.push_back(e.step);
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{0, 1, 2, 3}));
}

}  // namespace
}  // namespace keel
