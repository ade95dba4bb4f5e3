// `keel memory`, `keel summary`, `keel models` and the HBM-exhausted path, end to end.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "tests/support/cli_runner.h"

namespace keel::testing {
namespace {

using ::testing::HasSubstr;

TEST(MemoryCli, MlpOnV3_8ReportsExactPerCoreFigures) {
  CommandResult r = run_keel("memory --model mlp --device v3-8 --batch-per-core 16 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["device"], "v3-8");
  EXPECT_EQ(j["cores"], 8);
  EXPECT_EQ(j["hbm_bytes_per_core"], int64_t{16} << 30);
  EXPECT_EQ(j["batch_per_core"], 16);
  EXPECT_EQ(j["fits"], true);
  EXPECT_TRUE(j["max_batch_per_core"].is_null());
  ASSERT_EQ(j["per_core"].size(), 8u);
  for (int c = 0; c < 8; ++c) {
    const nlohmann::json& core = j["per_core"][c];
    EXPECT_EQ(core["core"], c);
    EXPECT_EQ(core["parameters"], 407080);
    EXPECT_EQ(core["gradients"], 407080);
    EXPECT_EQ(core["optimizer"], 814160);
    // The shard: 16 images of 784 floats and 16 one-hot labels of 10.
    EXPECT_EQ(core["inputs"], 2 * (16 * 784 * 4 + 16 * 10 * 4));  // the step's batch and the prefetch slot's
    EXPECT_GT(core["activations"].get<int64_t>(), 16 * 128 * 4);
    EXPECT_GE(core["peak"].get<int64_t>(), 407080 + 407080 + 814160);
  }
}

TEST(MemoryCli, ActivationsGrowWithTheBatch) {
  auto activations = [](int batch) {
    CommandResult r = run_keel("memory --model mlp --device v3-8 --batch-per-core " + std::to_string(batch) + " --json");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out)["per_core"][0]["activations"].get<int64_t>();
  };
  EXPECT_EQ(activations(32), 2 * activations(16));
}

TEST(MemoryCli, MaxBatchTrainsAndOneMoreRunsOut) {
  CommandResult r = run_keel("memory --model mlp --cores 2 --hbm-per-core 8MiB --batch-per-core 1 --max-batch --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const int64_t max_batch = nlohmann::json::parse(r.out)["max_batch_per_core"].get<int64_t>();
  ASSERT_GT(max_batch, 100);

  const std::string dir = make_temp_dir("keel-maxbatch");
  CommandResult fits = run_keel("train --model mlp --cores 2 --hbm-per-core 8MiB --batch-per-core " +
                                std::to_string(max_batch) + " --epochs 1 --stop-after-steps 2 --quiet --checkpoint-dir " +
                                dir + "/a");
  EXPECT_EQ(fits.exit_code, 0) << fits.err;
  CommandResult over = run_keel("train --model mlp --cores 2 --hbm-per-core 8MiB --batch-per-core " +
                                std::to_string(max_batch + 1) + " --epochs 1 --stop-after-steps 2 --quiet --checkpoint-dir " +
                                dir + "/b");
  EXPECT_EQ(over.exit_code, 3) << over.err;
  EXPECT_THAT(over.err, HasSubstr("Resource exhausted"));
  std::filesystem::remove_all(dir);
}

TEST(MemoryCli, PlanSaysDoesNotFitWhenPeakExceedsBudget) {
  CommandResult r = run_keel("memory --model mlp --cores 2 --hbm-per-core 4MiB --batch-per-core 8192 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["fits"], false);
}

TEST(MemoryCli, ExhaustedBudgetExitsThreeWithReportAndLeavesCheckpointUntouched) {
  const std::string dir = make_temp_dir("keel-oom");
  // A previous run's checkpoint in the directory.
  CommandResult first = run_keel("train --model mlp --device cpu --batch-per-core 64 --epochs 1 --stop-after-steps 3 --quiet "
                                 "--checkpoint-dir " + dir);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string before = md5_of_dir(dir);
  ASSERT_THAT(before, HasSubstr("ckpt-3.h5"));

  CommandResult r = run_keel("train --model mlp --dataset fashion_mnist --cores 2 --hbm-per-core 4MiB "
                             "--batch-per-core 8192 --quiet --overwrite --checkpoint-dir " + dir);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_THAT(r.err, HasSubstr("core 0"));
  EXPECT_THAT(r.err, HasSubstr("25690112 bytes"));   // 8192 x 784 floats
  EXPECT_THAT(r.err, HasSubstr("infeed:images"));
  EXPECT_THAT(r.err, HasSubstr("inputs"));
  EXPECT_THAT(r.err, HasSubstr("of 4194304"));       // capacity
  EXPECT_THAT(r.err, HasSubstr("largest live allocations"));
  EXPECT_THAT(r.err, HasSubstr("dense/kernel (784, 128)"));
  EXPECT_EQ(md5_of_dir(dir), before);
  std::filesystem::remove_all(dir);
}

TEST(SummaryCli, MlpParameterCounts) {
  CommandResult r = run_keel("summary --model mlp");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Total params: 101,770"));
  EXPECT_THAT(r.out, HasSubstr("Trainable params: 101,770"));
  EXPECT_THAT(r.out, HasSubstr("Non-trainable params: 0"));
  EXPECT_THAT(r.out, HasSubstr(" dense (Dense)               (None, 128)               100480"));
}

TEST(ModelsCli, ListsTheZoo) {
  CommandResult r = run_keel("models");
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("mlp "));
  EXPECT_THAT(r.out, HasSubstr("mlp-wide"));
}

TEST(Cli, EveryVerbHasHelp) {
  for (const char* verb : {"train", "resume", "evaluate", "memory", "summary", "models"}) {
    CommandResult r = run_keel(std::string(verb) + " --help");
    EXPECT_EQ(r.exit_code, 0) << verb;
    EXPECT_THAT(r.out, HasSubstr("Usage: keel " + std::string(verb))) << verb;
  }
}

}  // namespace
}  // namespace keel::testing
