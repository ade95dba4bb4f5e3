// What a checkpoint says about its run, checked before anything is built from it
// (tools/cli/stored_run.h), on values rather than files: the training state's counters, the run
// configuration and the model_config. Each refusal is a CheckpointError (exit 2) naming the file and
// the value, under 1 KB.
#include "tools/cli/stored_run.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "framework/device/strategy.h"
#include "framework/layers/layer.h"

namespace keel::cli {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

TrainState valid_state() {
  TrainState s;
  s.step = 5;
  s.epoch = 0;
  s.batch_in_epoch = 5;
  s.config = RunConfig{}.to_json();
  return s;
}

// The model_config of `config`'s model, as a checkpoint of it stores it.
json model_config_of(const RunConfig& config) {
  clear_session();
  ReplicatedStrategy strategy(DeviceSpec::preset("cpu"), ReplicatedStrategy::Options{/*abstract=*/true, 0});
  auto scope = strategy.scope();
  return build_model(config)->to_config();
}

std::string refusal(const TrainState& state, const std::string& model_config = "") {
  try {
    check_stored_run("run/ckpt-5.h5", state, model_config);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

TEST(StoredRunTest, ARealRunIsAccepted) {
  const StoredRun run = check_stored_run("run/ckpt-5.h5", valid_state(), model_config_of(RunConfig{}).dump());
  EXPECT_EQ(run.config.to_json(), RunConfig{}.to_json());
  EXPECT_EQ(run.model_config, model_config_of(RunConfig{}));
  EXPECT_EQ(check_stored_run("f", valid_state(), "").model_config, json()) << "no model_config: nothing to compare";
}

TEST(StoredRunTest, CountersOutOfRangeAreRefused) {
  TrainState negative = valid_state();
  negative.step = -1;
  EXPECT_THAT(refusal(negative), HasSubstr("step must be between 0 and 2^48"));
  EXPECT_THAT(refusal(negative), HasSubstr("run/ckpt-5.h5"));
  TrainState epoch = valid_state();
  epoch.epoch = -3;
  EXPECT_THAT(refusal(epoch), HasSubstr("epoch"));
  TrainState batch = valid_state();
  batch.batch_in_epoch = int64_t{1} << 60;
  EXPECT_THAT(refusal(batch), HasSubstr("batch in the epoch"));
  TrainState totals = valid_state();
  totals.epoch_totals.samples = 10;
  totals.epoch_totals.correct = 11;
  EXPECT_THAT(refusal(totals), HasSubstr("correct"));
  totals.epoch_totals.correct = 1;
  totals.epoch_totals.loss_sum = std::nan("");
  EXPECT_THAT(refusal(totals), HasSubstr("loss sum"));
}

TEST(StoredRunTest, AHostileRunConfigIsACheckpointError) {
  TrainState classes = valid_state();
  classes.config["classes"] = int64_t{1} << 62;
  const std::string message = refusal(classes);
  EXPECT_THAT(message, HasSubstr("run/ckpt-5.h5: its run configuration"));
  EXPECT_THAT(message, HasSubstr("2^24"));
  EXPECT_LT(message.size(), 1024u);
  TrainState not_an_object = valid_state();
  not_an_object.config = "mlp";
  EXPECT_THAT(refusal(not_an_object), HasSubstr("must be an object"));
}

TEST(StoredRunTest, AHostileModelConfigIsACheckpointError) {
  json units = model_config_of(RunConfig{});
  units["config"]["layers"][1]["config"]["units"] = 1000000000;
  const std::string message = refusal(valid_state(), units.dump());
  EXPECT_THAT(message, HasSubstr("units must be between 1 and 2^24"));
  EXPECT_THAT(message, HasSubstr("1000000000"));
  EXPECT_THAT(refusal(valid_state(), "{not json"), HasSubstr("not valid JSON"));
}

TEST(StoredRunTest, TheRebuiltModelMustMatchTheStoredConfig) {
  const RunConfig config;
  json stored = model_config_of(config);
  StoredRun run = check_stored_run("run/ckpt-5.h5", valid_state(), stored.dump());
  clear_session();
  ReplicatedStrategy strategy(DeviceSpec::preset("cpu"), ReplicatedStrategy::Options{/*abstract=*/true, 0});
  auto scope = strategy.scope();
  const std::unique_ptr<Model> model = build_model(config);
  check_model_matches(run, *model);
  // Within every limit, and still not this model: 10 units stored where the run builds 128.
  run.model_config["config"]["layers"][1]["config"]["units"] = 10;
  try {
    check_model_matches(run, *model);
    ADD_FAILURE() << "a different model_config was accepted";
  } catch (const CheckpointError& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("/config/layers/1/config/units"));
  }
}

}  // namespace
}  // namespace keel::cli
