#include "tools/cli/stored_run.h"

#include <cmath>
#include <cstdint>
#include <stdexcept>

#include "framework/checkpoint/h5_file.h"
#include "framework/core/limits.h"
#include "framework/model/model_config.h"

namespace keel::cli {
namespace {

void check_train_state(const TrainState& s) {
  check_in_range("its step", s.step, 0, kMaxSteps);
  check_in_range("its epoch", s.epoch, 0, kMaxEpochs);
  check_in_range("its batch in the epoch", s.batch_in_epoch, 0, kMaxSteps);
  const StepTotals& t = s.epoch_totals;
  check_in_range("its epoch's sample count", t.samples, 0, INT64_MAX);
  check_in_range("its epoch's correct count", t.correct, 0, t.samples);
  if (!std::isfinite(t.loss_sum)) throw std::invalid_argument("its epoch's loss sum is not finite");
}

}  // namespace

StoredRun check_stored_run(const std::string& file, const TrainState& state, const std::string& model_config_text) {
  StoredRun run;
  run.file = file;
  run.state = state;
  try {
    check_train_state(state);
  } catch (const std::invalid_argument& e) {
    throw CheckpointError("checkpoint " + file + ": its training state is damaged: " + e.what());
  }
  try {
    run.config = RunConfig::from_json(state.config);
  } catch (const std::exception& e) {  // std::invalid_argument, or a json error from a lookup
    throw CheckpointError("checkpoint " + file + ": its run configuration is damaged: " + e.what());
  }
  if (!model_config_text.empty()) {
    try {
      run.model_config = parse_model_config(model_config_text);
    } catch (const std::invalid_argument& e) {
      throw CheckpointError("checkpoint " + file + ": " + e.what());
    }
  }
  return run;
}

StoredRun read_stored_run(const std::string& file) {
  const TrainState state = read_train_state(file);
  std::string model_config;
  {
    H5File f = H5File::open_read(file);
    if (f.has_attr("/", "model_config")) model_config = f.get_attr_string("/", "model_config");
  }
  return check_stored_run(file, state, model_config);
}

void check_model_matches(const StoredRun& run, const Model& model) {
  if (run.model_config.is_null()) return;
  const std::string difference = first_config_difference(run.model_config, model.to_config());
  if (!difference.empty()) {
    throw CheckpointError("checkpoint " + run.file + ": its model_config does not describe the model its run "
                          "configuration builds (" + run.config.model + "; first difference at " + difference +
                          "): the file was edited or damaged");
  }
}

}  // namespace keel::cli
