// What a checkpoint says about its run — its training state, its run configuration and its
// model_config — read and checked against keel's limits (framework/core/limits.h) before anything
// is built from it, so that `keel evaluate` and `keel resume` on an edited or damaged file end with
// one clear message (exit 2), never with a huge allocation or a crash.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "framework/checkpoint/checkpoint.h"
#include "framework/model/model.h"
#include "tools/cli/run_config.h"

namespace keel::cli {

struct StoredRun {
  std::string file;
  TrainState state;
  RunConfig config;
  nlohmann::json model_config;  // the root attribute, parsed and checked (null if the file has none)
};

// Reads `file`'s training state and model_config and checks them (check_stored_run). Every failure
// is a CheckpointError naming the file.
StoredRun read_stored_run(const std::string& file);

// The checks alone, on what a checkpoint holds: the training state's counters (step, epoch, batch,
// running totals) within the limits, the run configuration through RunConfig::from_json, the
// model_config text through parse_model_config (an empty text: no model_config). CheckpointError
// naming `file` and the value.
StoredRun check_stored_run(const std::string& file, const TrainState& state, const std::string& model_config_text);

// The model rebuilt from the run configuration must be the one the checkpoint's model_config
// describes: CheckpointError naming the first difference otherwise.
void check_model_matches(const StoredRun& run, const Model& model);

}  // namespace keel::cli
