// Fuzzes the path `keel evaluate` and `keel resume` take from what a checkpoint says about its run to
// a planned training step: the /keel/train_state JSON (step, epoch, ..., and the run configuration
// under "config") and the root model_config attribute, through check_stored_run
// (RunConfig::from_json + validate, the training state's counters, parse_model_config), building
// the configured model on abstract tensors, check_model_matches, and planning its training step
// (plan_training_step, and check_training_step_fits as `keel train`/`resume` do before any data).
//
// Input: the train_state text, a newline, the model_config text: a checkpoint's two strings (the seeds
// in corpus/run_config are those of real checkpoints written by `keel train`: the MLPs on cpu, v3-8
// and a custom device with SGD and a cosine schedule, mid-epoch and at an epoch end, and ResNet18).
//
// Contract under test: each stage succeeds or throws a user-error type (std::invalid_argument,
// UsageError, CheckpointError, DataError, ResourceExhausted) — never a crash, UB, a leak, another
// exception type (std::bad_alloc from a size taken on trust included), nor an allocation over 1 GiB
// (run_fuzzers.sh passes -malloc_limit_mb=1024).
//
// Time bound: a plan runs once per core, so the harness plans on at most kMaxFuzzCores cores (the
// configuration itself is checked with its real count first); 4096 cores of a ResNet152 take
// minutes, which a fuzzer must not spend on one input. The arithmetic of large counts is checked by
// the unit tests of framework/core/shape.h and tools/cli/run_config.h.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "framework/checkpoint/checkpoint_error.h"
#include "framework/data/data_error.h"
#include "framework/device/ledger.h"
#include "framework/device/strategy.h"
#include "framework/layers/layer.h"
#include "framework/model/planner.h"
#include "tools/cli/run_config.h"
#include "tools/cli/stored_run.h"

namespace {

using nlohmann::json;

constexpr int kMaxFuzzCores = 8;

// The training state as checkpoint.cc's reader builds it, from the same fields; an input that reader
// would refuse (a missing field, a wrong type) is skipped here, since checkpoint_fuzz covers it. Only
// integers are taken for integer fields: converting a float would be undefined behaviour here.
std::optional<keel::TrainState> train_state(const std::string& text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  auto integer = [&](const json& v) {
    return v.is_number_integer() && (!v.is_number_unsigned() || v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX));
  };
  for (const char* key : {"step", "epoch", "batch_in_epoch", "iterator_state", "epoch_totals", "config"}) {
    if (!j.contains(key)) return std::nullopt;
  }
  const json& t = j["epoch_totals"];
  if (!integer(j["step"]) || !integer(j["epoch"]) || !integer(j["batch_in_epoch"]) || !t.is_object() ||
      !t.contains("loss_sum") || !t["loss_sum"].is_number() || !t.contains("correct") || !integer(t["correct"]) ||
      !t.contains("samples") || !integer(t["samples"])) {
    return std::nullopt;
  }
  const int64_t epoch = j["epoch"].get<int64_t>();
  if (epoch < INT32_MIN || epoch > INT32_MAX) return std::nullopt;  // get<int> in the reader
  keel::TrainState s;
  s.step = j["step"].get<int64_t>();
  s.epoch = static_cast<int>(epoch);
  s.batch_in_epoch = j["batch_in_epoch"].get<int64_t>();
  s.iterator_state = j["iterator_state"];
  s.epoch_totals.loss_sum = t["loss_sum"].get<double>();
  s.epoch_totals.correct = t["correct"].get<int64_t>();
  s.epoch_totals.samples = t["samples"].get<int64_t>();
  s.config = j["config"];
  return s;
}

// What `keel evaluate` / `keel resume` do with a stored run before touching data: check it, rebuild
// the model and compare, plan the step; then what `keel train` checks before any allocation.
void exercise(const keel::TrainState& state, const std::string& model_config) {
  keel::cli::StoredRun run = keel::cli::check_stored_run("fuzz.h5", state, model_config);
  keel::cli::RunConfig config = run.config;
  if (config.device.cores > kMaxFuzzCores) config.device.cores = kMaxFuzzCores;  // see the header
  keel::clear_session();
  {
    keel::ReplicatedStrategy strategy(config.device, keel::ReplicatedStrategy::Options{/*abstract=*/true, 0});
    auto scope = strategy.scope();
    const std::unique_ptr<keel::Model> model = keel::cli::build_model(config);
    keel::cli::check_model_matches(run, *model);
  }
  const keel::ModelFactory factory = keel::cli::model_factory(config);
  const keel::Shape labels = keel::cli::label_shape(config);
  const keel::MemoryPlan plan = keel::plan_training_step(factory, config.device, config.batch_per_core, labels);
  if (plan.per_core.size() != static_cast<size_t>(config.device.cores)) {
    std::fprintf(stderr, "run_config_fuzz: a plan of %zu cores for %d\n", plan.per_core.size(), config.device.cores);
    std::abort();
  }
  keel::check_training_step_fits(factory, config.device, config.batch_per_core, labels);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  const std::string state_text(input.substr(0, newline));
  const std::string model_config(newline == std::string_view::npos ? std::string_view() : input.substr(newline + 1));
  const std::optional<keel::TrainState> state = train_state(state_text);
  if (!state) return 0;
  try {
    exercise(*state, model_config);
  } catch (const keel::CheckpointError&) {
  } catch (const keel::cli::UsageError&) {
  } catch (const keel::DataError&) {
  } catch (const keel::ResourceExhausted&) {
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
