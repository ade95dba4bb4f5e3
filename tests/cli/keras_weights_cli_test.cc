// Keras weights in, end to end: `keel evaluate --model M --weights FILE` gives PyTorch's accuracy for
// weights PyTorch trained and h5py wrote in Keras's layouts (bench/golden_keras_weights.py), and
// `keel train --init-weights FILE --by-name --freeze REGEX` fine-tunes from them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "framework/checkpoint/h5_file.h"
#include "tests/support/checkpoint_state.h"
#include "tests/support/cli_runner.h"

namespace keel::testing {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

const std::string kGolden = std::string(KEEL_TESTS_DIR) + "/golden/keras_mlp_weights.h5";

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

std::vector<float> dataset(const std::string& file, const std::string& path) {
  H5File f = H5File::open_read(file);
  const Shape shape = f.dataset_shape(path);
  std::vector<float> v(static_cast<size_t>(num_elements(shape)));
  f.read_floats(path, shape, v.data());
  return v;
}

class KerasWeightsCli : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("keel-keras-cli"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(KerasWeightsCli, AKerasMlpFileEvaluatesAtPyTorchsAccuracy) {
  const nlohmann::json want = read_json(std::string(KEEL_TESTS_DIR) + "/golden/keras_mlp_weights.json");
  CommandResult r = run_keel("evaluate --model mlp --weights " + kGolden + " --device cpu --batch-per-core 1000 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json got = nlohmann::json::parse(r.out);
  EXPECT_EQ(got["samples"], 10000);
  EXPECT_NEAR(got["accuracy"].get<double>(), want["test_accuracy"].get<double>(), 2e-4);  // at most 2 ties apart
  EXPECT_NEAR(got["loss"].get<double>(), want["test_loss"].get<double>(), 1e-3);
}

TEST_F(KerasWeightsCli, FilesThatDoNotFitExitTwoWithOneMessage) {
  CommandResult wrong_model = run_keel("evaluate --model mlp-wide --weights " + kGolden + " --device cpu");
  EXPECT_EQ(wrong_model.exit_code, 2);
  EXPECT_THAT(wrong_model.err, HasSubstr("(784, 128)"));
  EXPECT_THAT(wrong_model.err, HasSubstr("(784, 1024)"));
  const std::string truncated = dir_ + "/truncated.h5";
  fs::copy_file(kGolden, truncated);
  fs::resize_file(truncated, fs::file_size(truncated) / 3);
  for (const std::string& cmd : {"evaluate --model mlp --device cpu --weights " + truncated,
                                 "train --model mlp --device cpu --epochs 1 --init-weights " + truncated +
                                     " --checkpoint-dir " + dir_ + "/run"}) {
    CommandResult r = run_keel(cmd);
    EXPECT_EQ(r.exit_code, 2) << cmd;
    EXPECT_THAT(r.err, HasSubstr("truncated.h5"));
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  EXPECT_FALSE(fs::exists(dir_ + "/run/latest"));
  CommandResult no_file = run_keel("evaluate --model mlp --weights " + dir_ + "/none.h5");
  EXPECT_EQ(no_file.exit_code, 2);
  CommandResult both = run_keel("evaluate " + dir_ + " --model mlp --weights " + kGolden);
  EXPECT_EQ(both.exit_code, 2);
  CommandResult skip_alone = run_keel("train --model mlp --init-weights " + kGolden + " --skip-mismatch --checkpoint-dir " + dir_ + "/x");
  EXPECT_EQ(skip_alone.exit_code, 2);
  EXPECT_THAT(skip_alone.err, HasSubstr("--by-name"));
}

TEST_F(KerasWeightsCli, FineTuningKeepsFrozenLayersAndGivesThemNoSlots) {
  const std::string run = dir_ + "/tuned";
  CommandResult r = run_keel("train --model mlp --device cpu --batch-per-core 64 --epochs 1 --stop-after-steps 5 --quiet "
                             "--init-weights " + kGolden + " --by-name --freeze '^dense$' --checkpoint-dir " + run);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Initialized 2 layers"));
  const auto values = read_checkpoint_values(run + "/ckpt-5.h5");
  EXPECT_EQ(values.at("model_weights/dense/dense/kernel:0"), dataset(kGolden, "dense/dense/kernel:0"));
  EXPECT_EQ(values.at("model_weights/dense/dense/bias:0"), dataset(kGolden, "dense/dense/bias:0"));
  EXPECT_NE(values.at("model_weights/dense_1/dense_1/kernel:0"), dataset(kGolden, "dense_1/dense_1/kernel:0"));
  EXPECT_EQ(values.count("optimizer_weights/Adam/dense/kernel/m:0"), 0u) << "a frozen layer has no Adam slots";
  EXPECT_EQ(values.count("optimizer_weights/Adam/dense_1/kernel/m:0"), 1u);
  // The plan shows the saving: no gradients or slots for the frozen 100,480 parameters.
  CommandResult frozen = run_keel("memory --model mlp --device cpu --batch-per-core 64 --freeze '^dense$' --json");
  CommandResult full = run_keel("memory --model mlp --device cpu --batch-per-core 64 --json");
  ASSERT_EQ(frozen.exit_code, 0) << frozen.err;
  ASSERT_EQ(full.exit_code, 0) << full.err;
  const auto core = [](const CommandResult& c) { return nlohmann::json::parse(c.out)["per_core"][0]; };
  EXPECT_EQ(core(full)["optimizer"].get<int64_t>() - core(frozen)["optimizer"].get<int64_t>(), 2 * 100480 * 4);
  EXPECT_EQ(core(full)["gradients"].get<int64_t>() - core(frozen)["gradients"].get<int64_t>(), 100480 * 4);
  // Resuming keeps the layers frozen.
  CommandResult resumed = run_keel("resume " + run + " --stop-after-steps 3 --quiet");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(read_checkpoint_values(run + "/ckpt-8.h5").at("model_weights/dense/dense/kernel:0"),
            dataset(kGolden, "dense/dense/kernel:0"));
}

// Weights of a PyTorch ResNet18 written in model.save's layout (45 MB, made here by the bench script),
// after 12 Adam steps (test accuracy about 0.54), evaluated on the first 2,000 test images by both
// (`--steps 4` of 500), and its notop file fine-tuned with a new head.
TEST_F(KerasWeightsCli, APyTorchResNet18EvaluatesAtItsAccuracyAndItsNotopFileFineTunes) {
  CommandResult gen = run_command("/usr/bin/python3 " + std::string(KEEL_SOURCE_DIR) + "/bench/golden_keras_weights.py resnet18 " +
                                  dir_ + " --steps 12 --test-samples 2000");
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  const nlohmann::json want = read_json(dir_ + "/resnet18.json");
  CommandResult r = run_keel("evaluate --model resnet18 --weights " + dir_ + "/resnet18.h5 --device cpu --batch-per-core 500 --steps 4 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json got = nlohmann::json::parse(r.out);
  ASSERT_EQ(got["samples"].get<int64_t>(), 2000);
  EXPECT_NEAR(got["accuracy"].get<double>(), want["test_accuracy"].get<double>(), 1.6e-3);  // 3 images of 2,000

  CommandResult topological = run_keel("evaluate --model resnet18 --weights " + dir_ + "/resnet18_notop.h5 --device cpu");
  EXPECT_EQ(topological.exit_code, 2);
  EXPECT_THAT(topological.err, HasSubstr("--by-name"));
  const std::string run = dir_ + "/tuned";
  CommandResult t = run_keel("train --model resnet18 --classes 10 --device cpu --batch-per-core 8 --epochs 1 --stop-after-steps 2 "
                             "--quiet --init-weights " + dir_ + "/resnet18_notop.h5 --by-name --freeze '^conv' --checkpoint-dir " + run);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_THAT(t.out, HasSubstr("not in the file, left as initialized: predictions"));
  const auto values = read_checkpoint_values(run + "/ckpt-2.h5");
  EXPECT_EQ(values.at("model_weights/conv1_conv/conv1_conv/kernel:0"),
            dataset(dir_ + "/resnet18_notop.h5", "conv1_conv/conv1_conv/kernel:0"));
  EXPECT_EQ(values.at("model_weights/conv5_block2_2_bn/conv5_block2_2_bn/moving_mean:0"),
            dataset(dir_ + "/resnet18_notop.h5", "conv5_block2_2_bn/conv5_block2_2_bn/moving_mean:0"))
      << "a frozen BatchNormalization runs in inference mode: its statistics do not move";
  EXPECT_EQ(values.count("optimizer_weights/Adam/predictions/kernel/m:0"), 1u);
  EXPECT_EQ(values.count("optimizer_weights/Adam/conv1_conv/kernel/m:0"), 0u);
}

}  // namespace
}  // namespace keel::testing
