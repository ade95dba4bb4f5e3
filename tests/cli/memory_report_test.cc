// A run's memory footprint beside its accuracy (tools/cli/memory_report.h): each checkpoint records
// what training measured, `keel evaluate RUN` reports it with the evaluation's own footprint, and
// `keel memory RUN` plans the run's configuration beside it — equal to the byte.
#include "tools/cli/memory_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "framework/checkpoint/h5_file.h"
#include "tests/support/checkpoint_state.h"
#include "tests/support/cli_runner.h"

namespace keel::testing {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

class MemoryReport : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("keel-memory-report"); }
  void TearDown() override { fs::remove_all(dir_); }

  nlohmann::json json_of(const std::string& args) {
    CommandResult r = run_keel(args);
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json();
  }
  // Trains, then checks evaluate's training footprint against memory's plan, category by category.
  void expect_plan_equals_training(const std::string& train_args, const std::string& run, int64_t params) {
    CommandResult t = run_keel("train " + train_args + " --quiet --checkpoint-dir " + run);
    ASSERT_EQ(t.exit_code, 0) << t.err;
    const nlohmann::json e = json_of("evaluate " + run + " --json");
    const nlohmann::json m = json_of("memory " + run + " --json");
    ASSERT_TRUE(e["training_memory"].is_object()) << e.dump();
    EXPECT_EQ(m["plan_equals_measured"], true);
    const nlohmann::json& trained = e["training_memory"]["per_core"];
    ASSERT_EQ(trained.size(), m["per_core"].size());
    for (size_t c = 0; c < trained.size(); ++c) {
      for (const char* k : {"parameters", "gradients", "optimizer", "activations", "inputs", "workspace", "peak"}) {
        EXPECT_EQ(trained[c][k], m["per_core"][c][k]) << "core " << c << " " << k;
      }
      EXPECT_GT(trained[c]["gradients"].get<int64_t>(), 0);
      EXPECT_GT(trained[c]["host_to_core_bytes"].get<int64_t>(), 0);
      const nlohmann::json& inference = e["inference_memory"]["per_core"][c];
      EXPECT_EQ(inference["gradients"], 0) << "inference holds no gradients";
      EXPECT_EQ(inference["optimizer"], 0) << "inference holds no optimizer state";
      EXPECT_EQ(inference["parameters"], trained[c]["parameters"]);
      EXPECT_GT(inference["activations"].get<int64_t>(), 0);
    }
    EXPECT_EQ(e["params"], params);
    EXPECT_GT(e["checkpoint_bytes"].get<int64_t>(), params * 4);
  }
  std::string dir_;
};

TEST_F(MemoryReport, MlpOnV38PlanEqualsWhatTrainingMeasured) {
  expect_plan_equals_training("--model mlp --device v3-8 --batch-per-core 16 --epochs 1 --stop-after-steps 20",
                              dir_ + "/mlp", 101770);
  // Text: the footprint tables and the verdict.
  CommandResult text = run_keel("evaluate " + dir_ + "/mlp");
  EXPECT_THAT(text.out, HasSubstr("Training footprint per core on v3-8, measured over 20 steps"));
  EXPECT_THAT(text.out, HasSubstr("Inference footprint per core"));
  EXPECT_THAT(text.out, HasSubstr("101770 parameters"));
  CommandResult memory = run_keel("memory " + dir_ + "/mlp");
  EXPECT_THAT(memory.out, HasSubstr("Plan and measurement are equal."));
}

TEST_F(MemoryReport, ResNet18OnTwoCoresPlanEqualsWhatTrainingMeasured) {
  expect_plan_equals_training("--model resnet18 --input-shape 32x32x1 --cores 2 --hbm-per-core 2GiB --batch-per-core 32 "
                              "--epochs 1 --stop-after-steps 2",
                              dir_ + "/resnet18", 11189770);
}

TEST_F(MemoryReport, ResumingExtendsTheRecordAndOldCheckpointsSayUnknown) {
  const std::string run = dir_ + "/run";
  ASSERT_EQ(run_keel("train --model mlp --device cpu --batch-per-core 64 --epochs 1 --stop-after-steps 10 --quiet "
                     "--checkpoint-dir " + run).exit_code, 0);
  const nlohmann::json first = json_of("evaluate " + run + " --json")["training_memory"];
  ASSERT_EQ(run_keel("resume " + run + " --stop-after-steps 5 --quiet").exit_code, 0);
  const nlohmann::json second = json_of("evaluate " + run + " --json")["training_memory"];
  EXPECT_EQ(first["steps"], 10);
  EXPECT_EQ(second["steps"], 15);
  EXPECT_EQ(second["per_core"][0]["peak"], first["per_core"][0]["peak"]);
  EXPECT_GT(second["per_core"][0]["host_to_core_bytes"].get<int64_t>(), first["per_core"][0]["host_to_core_bytes"].get<int64_t>());

  // A checkpoint written before keel recorded it: its train state has no "memory".
  const std::string old = run + "/ckpt-15.h5";
  nlohmann::json state = train_state_json(old);
  state.erase("memory");
  rewrite_train_state(old, state);
  const nlohmann::json e = json_of("evaluate " + old + " --json");
  EXPECT_TRUE(e["training_memory"].is_null());
  EXPECT_EQ(e["inference_memory"]["per_core"][0]["optimizer"], 0);
  CommandResult text_out = run_keel("evaluate " + old);
  EXPECT_THAT(text_out.out, HasSubstr("Training footprint: unknown"));
  EXPECT_TRUE(json_of("memory " + old + " --json")["plan_equals_measured"].is_null());
  // And resuming from it starts a new record.
  ASSERT_EQ(run_keel("resume " + run + " --stop-after-steps 2 --quiet").exit_code, 0);
  EXPECT_EQ(json_of("evaluate " + run + " --json")["training_memory"]["steps"], 2);
}

TEST_F(MemoryReport, SeveralRunsMakeOneComparisonTable) {
  for (const std::string& device : {"cpu", "v3-8"}) {
    ASSERT_EQ(run_keel("train --model mlp --device " + device + " --batch-per-core 16 --epochs 1 --stop-after-steps 3 --quiet "
                       "--checkpoint-dir " + dir_ + "/" + device).exit_code, 0);
  }
  const std::string both = dir_ + "/cpu " + dir_ + "/v3-8";
  CommandResult text = run_keel("evaluate " + both);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("train peak/core"));
  EXPECT_THAT(text.out, HasSubstr("optimizer"));  // the category that dominates the MLP's training
  CommandResult csv = run_keel("evaluate " + both + " --csv");
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  EXPECT_EQ(std::count(csv.out.begin(), csv.out.end(), '\n'), 3);
  EXPECT_THAT(csv.out, HasSubstr("run,device,batch_per_core,accuracy,loss,training_peak_per_core"));
  const nlohmann::json j = json_of("evaluate " + both + " --json");
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[1]["training_memory"]["device"], "v3-8");
  EXPECT_EQ(j[1]["training_memory"]["per_core"].size(), 8u);
  EXPECT_EQ(run_keel("evaluate " + both + " --recompute-bn-stats 2").exit_code, 2);
}

}  // namespace
}  // namespace keel::testing
