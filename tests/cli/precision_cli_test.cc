// Mixed precision on the command line (issue 11 item 1): `keel train --precision mixed_bfloat16`
// records the policy, resumes bit-exactly, is planned exactly by `keel memory` (JSON "precision",
// about half the activations), trains the seed's MLP to float32's accuracy, and bad values exit 2.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/checkpoint/h5_file.h"
#include "tests/support/checkpoint_state.h"
#include "tests/support/cli_runner.h"

namespace keel::testing {
namespace {

using ::testing::HasSubstr;

class PrecisionCli : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("keel-precision"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

const std::string kBase = "train --model mlp --dataset fashion_mnist --device v3-8 --batch-per-core 4 --epochs 1 --seed 5 --quiet ";
const std::string kPrecisionRun = kBase + "--precision mixed_bfloat16 ";

nlohmann::json precision_train_state(const std::string& file) {
  return nlohmann::json::parse(H5File::open_read(file).read_string("keel/train_state"));
}

TEST_F(PrecisionCli, AMixedRunRecordsItsPolicyAndResumesBitIdentically) {
  const CommandResult straight = run_keel(kPrecisionRun + "--stop-after-steps 16 --checkpoint-dir " + dir_ + "/straight");
  ASSERT_EQ(straight.exit_code, 0) << straight.err;
  const CommandResult first = run_keel(kPrecisionRun + "--stop-after-steps 7 --checkpoint-dir " + dir_ + "/resumed");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const CommandResult rest = run_keel("resume " + dir_ + "/resumed --stop-after-steps 9 --quiet");
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  expect_bit_identical(dir_ + "/straight/ckpt-16.h5", dir_ + "/resumed/ckpt-16.h5");
  const nlohmann::json state = precision_train_state(dir_ + "/resumed/ckpt-16.h5");
  EXPECT_EQ(state["config"]["precision"], "mixed_bfloat16");
  EXPECT_EQ(state["memory"]["precision"], "mixed_bfloat16");
  // The layers' configs say so too (Keras's "dtype"), and the variables stay float32.
  const std::string model_config = H5File::open_read(dir_ + "/straight/ckpt-16.h5").get_attr_string("/", "model_config");
  EXPECT_THAT(model_config, HasSubstr("\"dtype\":\"mixed_bfloat16\""));
  // A float32 run of the same steps differs: the policy is applied.
  const CommandResult f32 = run_keel(kBase + "--stop-after-steps 16 --checkpoint-dir " + dir_ + "/f32");
  ASSERT_EQ(f32.exit_code, 0) << f32.err;
  EXPECT_NE(read_checkpoint_values(dir_ + "/f32/ckpt-16.h5"), read_checkpoint_values(dir_ + "/straight/ckpt-16.h5"));
  // What training measured equals the plan of the run's own configuration, precision included.
  const CommandResult memory = run_keel("memory " + dir_ + "/straight --json");
  ASSERT_EQ(memory.exit_code, 0) << memory.err;
  const nlohmann::json j = nlohmann::json::parse(memory.out);
  EXPECT_EQ(j["precision"], "mixed_bfloat16");
  EXPECT_EQ(j["plan_equals_measured"], true) << memory.out.substr(0, 2000);
}

int64_t activations(const nlohmann::json& plan) { return plan["per_core"][0]["activations"].get<int64_t>(); }

TEST_F(PrecisionCli, MemoryPlansEachPrecision) {
  const std::string base = "memory --model resnet18 --input-shape 32x32x1 --device v3-8 --batch-per-core 16 --json";
  const CommandResult f32 = run_keel(base);
  const CommandResult mixed = run_keel(base + " --precision mixed_bfloat16 --max-batch");
  ASSERT_EQ(f32.exit_code, 0) << f32.err;
  ASSERT_EQ(mixed.exit_code, 0) << mixed.err;
  const nlohmann::json a = nlohmann::json::parse(f32.out), b = nlohmann::json::parse(mixed.out);
  EXPECT_EQ(a["precision"], "float32");
  EXPECT_EQ(b["precision"], "mixed_bfloat16");
  EXPECT_LE(activations(b), activations(a) * 53 / 100);
  EXPECT_EQ(a["per_core"][0]["parameters"], b["per_core"][0]["parameters"]);
  EXPECT_GT(b["max_batch_per_core"].get<int64_t>(), 0);
}

TEST_F(PrecisionCli, BadValuesExitTwo) {
  for (const std::string& verb : std::vector<std::string>{"train --model mlp --epochs 1 --checkpoint-dir " + dir_ + "/x",
                                                          "memory --model mlp --device v3-8"}) {
    const CommandResult r = run_keel(verb + " --precision mixed_float16");
    EXPECT_EQ(r.exit_code, 2) << verb;
    EXPECT_THAT(r.err, HasSubstr("--precision"));
    EXPECT_THAT(r.err, HasSubstr("mixed_bfloat16"));
  }
}

// The bar: the seed's MLP, 10 epochs at seed 1, within 0.3 points of float32's accuracy.
TEST(PrecisionAccuracyCli, MixedMlpTenEpochsIsWithinAThirdOfAPointOfFloat32) {
  const std::string dir = make_temp_dir("keel-precision-accuracy");
  double accuracy[2] = {0, 0};
  const char* policies[2] = {"float32", "mixed_bfloat16"};
  for (int i = 0; i < 2; ++i) {
    const std::string run = dir + "/" + policies[i];
    const CommandResult t = run_keel("train --model mlp --dataset fashion_mnist --device v3-8 --batch-per-core 16 --epochs 10 "
                                     "--seed 1 --quiet --precision " + std::string(policies[i]) + " --checkpoint-dir " + run);
    ASSERT_EQ(t.exit_code, 0) << t.err;
    const CommandResult e = run_keel("evaluate " + run + " --split test --json");
    ASSERT_EQ(e.exit_code, 0) << e.err;
    accuracy[i] = nlohmann::json::parse(e.out)["accuracy"].get<double>();
  }
  EXPECT_LE(std::fabs(accuracy[1] - accuracy[0]), 0.003) << "float32 " << accuracy[0] << ", mixed_bfloat16 " << accuracy[1];
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace keel::testing
