// ResNets through the CLI: memory plans, exact resume at a small size, bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "framework/checkpoint/checkpoint.h"
#include "framework/checkpoint/h5_file.h"
#include "framework/layers/layer.h"
#include "models/zoo.h"
#include "tests/support/checkpoint_state.h"
#include "tests/support/cli_runner.h"

namespace keel::testing {
namespace {

using ::testing::HasSubstr;

TEST(ResnetCli, Resnet50MemoryAt224AnswersAndFits) {
  CommandResult r = run_keel("memory --model resnet50 --input-shape 224x224x3 --classes 10 --device v3-8 "
                             "--batch-per-core 128 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["per_core"].size(), 8u);
  EXPECT_EQ(j["per_core"][0]["parameters"], 94432808);  // 23,608,202 params x 4 bytes
  EXPECT_GT(j["per_core"][0]["activations"].get<int64_t>(), int64_t{1} << 30);
  EXPECT_EQ(j["fits"], j["per_core"][0]["peak"].get<int64_t>() <= (int64_t{16} << 30));
}

TEST(ResnetCli, SummaryCounts) {
  CommandResult r = run_keel("summary --model resnet50 --classes 1000 --input-shape 224x224x3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Total params: 25,636,712"));
  EXPECT_THAT(r.out, HasSubstr("Trainable params: 25,583,592"));
  EXPECT_THAT(r.out, HasSubstr("Non-trainable params: 53,120"));
  CommandResult ten = run_keel("summary --model resnet50 --classes 10 --input-shape 224x224x3");
  ASSERT_EQ(ten.exit_code, 0) << ten.err;
  EXPECT_THAT(ten.out, HasSubstr("Total params: 23,608,202"));
}

TEST(ResnetCli, BadShapesAndClasses) {
  CommandResult small = run_keel("summary --model resnet50 --input-shape 28x28x3");
  EXPECT_EQ(small.exit_code, 2);
  EXPECT_THAT(small.err, HasSubstr("at least 32x32"));
  CommandResult classes = run_keel("memory --model resnet50 --classes 0");
  EXPECT_EQ(classes.exit_code, 2);
  EXPECT_THAT(classes.err, HasSubstr("--classes"));
}

TEST(ResnetCli, Resnet50ResumesBitIdenticallyAtASmallSize) {
  const std::string dir = make_temp_dir("keel-r50");
  const std::string run = "--model resnet50 --input-shape 32x32x3 --cores 2 --hbm-per-core 4GiB --batch-per-core 2 "
                          "--epochs 1 --seed 4 --quiet --keep 1 --shuffle-buffer 64 ";
  CommandResult a = run_keel("train " + run + "--stop-after-steps 4 --checkpoint-dir " + dir + "/straight");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  CommandResult b1 = run_keel("train " + run + "--stop-after-steps 2 --checkpoint-dir " + dir + "/split");
  ASSERT_EQ(b1.exit_code, 0) << b1.err;
  CommandResult b2 = run_keel("resume " + dir + "/split --stop-after-steps 2 --quiet");
  ASSERT_EQ(b2.exit_code, 0) << b2.err;
  const auto sa = read_checkpoint_values(dir + "/straight/ckpt-4.h5");
  const auto sb = read_checkpoint_values(dir + "/split/ckpt-4.h5");
  ASSERT_EQ(sa.size(), sb.size());
  // 318 model weights (incl. BN moving statistics) + iterations + 2 Adam slots per trainable weight.
  EXPECT_GT(sa.size(), 600u);
  for (const auto& [name, values] : sa) {
    ASSERT_TRUE(sb.count(name)) << name;
    EXPECT_EQ(values, sb.at(name)) << name;
  }
  std::filesystem::remove_all(dir);
}

// keel evaluate --recompute-bn-stats (issue 17): precise BN statistics from the run's training
// batches, evaluated at once and saved, on request, as a new file that evaluates the same.
TEST(ResnetCli, RecomputedBatchStatisticsAreEvaluatedAndSavedAsANewFile) {
  const std::string dir = make_temp_dir("keel-bnstats");
  CommandResult t = run_keel("train --model resnet18 --input-shape 32x32x1 --cores 2 --hbm-per-core 4GiB --batch-per-core 32 --epochs 1 "
                             "--stop-after-steps 3 --seed 2 --quiet --shuffle-buffer 64 --checkpoint-dir " + dir + "/run");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const std::string before = md5_of_dir(dir + "/run");
  CommandResult r = run_keel("evaluate " + dir + "/run --recompute-bn-stats 4 --output " + dir + "/bn.h5 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json got = nlohmann::json::parse(r.out);
  EXPECT_EQ(got["bn_stats_batches"], 4);
  EXPECT_EQ(md5_of_dir(dir + "/run"), before) << "the run's own checkpoints are untouched";
  // The saved file holds the recomputed statistics and the same weights: it evaluates alike.
  CommandResult again = run_keel("evaluate " + dir + "/bn.h5 --json");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(nlohmann::json::parse(again.out)["loss"], got["loss"]);
  const auto trained = read_checkpoint_values(dir + "/run/ckpt-3.h5");
  const auto refreshed = read_checkpoint_values(dir + "/bn.h5");
  int statistics_changed = 0;
  for (const auto& [name, values] : trained) {
    if (name.find("moving_") == std::string::npos) {
      EXPECT_EQ(values, refreshed.at(name)) << name;
    } else {
      statistics_changed += values != refreshed.at(name);
    }
  }
  EXPECT_EQ(statistics_changed, 2 * 20) << "every BatchNormalization's moving mean and variance were recomputed";
  // Never over a file, never into a run directory, never without the recomputation.
  for (const std::string& bad : std::vector<std::string>{"--recompute-bn-stats 2 --output " + dir + "/bn.h5",
                                 "--recompute-bn-stats 2 --output " + dir + "/run/other.h5",
                                 "--output " + dir + "/new.h5", std::string("--recompute-bn-stats 0")}) {
    CommandResult refused = run_keel("evaluate " + dir + "/run " + bad);
    EXPECT_EQ(refused.exit_code, 2) << bad << ": " << refused.err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/new.h5"));
  EXPECT_EQ(md5_of_dir(dir + "/run"), before);
  std::filesystem::remove_all(dir);
}

TEST(ResnetCli, RecomputingStatisticsOfAModelWithoutBatchNormalizationIsAUsageError) {
  const std::string dir = make_temp_dir("keel-bnstats-mlp");
  CommandResult t = run_keel("train --model mlp --device cpu --batch-per-core 64 --epochs 1 --stop-after-steps 1 "
                             "--quiet --checkpoint-dir " + dir);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  CommandResult r = run_keel("evaluate " + dir + " --recompute-bn-stats 2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("no BatchNormalization"));
  std::filesystem::remove_all(dir);
}

TEST(ResnetCheckpoint, ACheckpointOfAnotherArchitectureIsRefused) {
  const std::string dir = make_temp_dir("keel-arch");
  CommandResult a = run_keel("train --model mlp --device cpu --batch-per-core 64 --epochs 1 --stop-after-steps 1 --quiet "
                             "--checkpoint-dir " + dir);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  clear_session();
  ReplicatedStrategy s(DeviceSpec::preset("cpu"), {.abstract = true});
  auto scope = s.scope();
  std::unique_ptr<Model> resnet = zoo::build("resnet18", {{32, 32, 1}, 10});
  resnet->compile(std::make_shared<Adam>(), std::make_shared<CategoricalCrossentropy>());
  try {
    load_checkpoint(dir + "/ckpt-1.h5", *resnet, resnet->optimizer());
    FAIL() << "loaded an MLP checkpoint into a ResNet";
  } catch (const CheckpointError& e) {
    EXPECT_THAT(e.what(), HasSubstr("belongs to another model"));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace keel::testing
