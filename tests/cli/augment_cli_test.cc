// `keel train --augment` end to end: bad specs are refused with exit 2 and one line naming the step,
// the augmentation is part of the run (a resumed run sees the same images, bit for bit), and it
// changes what training sees.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/checkpoint_state.h"
#include "tests/support/cli_runner.h"

namespace keel::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

class AugmentCli : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("keel-augment"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

// ResNet18 at its smallest input, 2 cores x 4: a few steps take seconds.
const std::string kAugmentRun = "--model resnet18 --input-shape 32x32x1 --cores 2 --hbm-per-core 4GiB --batch-per-core 4 "
                         "--epochs 1 --seed 3 --shuffle-buffer 256 --quiet --keep 1 ";

TEST_F(AugmentCli, BadSpecsExit2WithOneLineNamingTheStep) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"rotate:0.1", "unknown step 'rotate'"},
      {"flip,,crop:4", "an empty step"},
      {"crop:40", "the padding 40 is outside [1, 32]"},
      {"crop:two", "'two' is not a whole number of pixels"},
      {"translate:2", "the factor 2 is outside (0, 1]"},
      {"zoom:0.1:0.1:0.1", "zoom takes one factor, or two"},
      {"flip:diagonal", "unknown mode 'diagonal'"},
      {"erase:0.5:0.4:0.1", "is not 0 <= S0 <= S1 <= 1"},
  };
  for (const auto& [spec, message] : bad) {
    CommandResult r = run_keel("train " + kAugmentRun + "--augment '" + spec + "' --checkpoint-dir " + dir_ + "/bad");
    EXPECT_EQ(r.exit_code, 2) << spec << ": " << r.err;
    EXPECT_THAT(r.err, StartsWith("keel train: --augment: bad augmentation step '")) << spec;
    EXPECT_THAT(r.err, HasSubstr(message)) << spec;
    EXPECT_THAT(r.err, HasSubstr("e.g. flip,crop:4")) << spec;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir_ + "/bad/latest")) << spec;
  }
  CommandResult empty = run_keel("train " + kAugmentRun + "--augment '' --checkpoint-dir " + dir_ + "/bad");
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_THAT(empty.err, HasSubstr("--augment needs steps"));
  // A model of flat vectors has no image to augment.
  CommandResult mlp = run_keel("train --model mlp --device cpu --augment flip --checkpoint-dir " + dir_ + "/mlp");
  EXPECT_EQ(mlp.exit_code, 2);
  EXPECT_THAT(mlp.err, HasSubstr("--augment needs an image model"));
}

TEST_F(AugmentCli, AResumedAugmentedRunIsBitIdenticalToAStraightOne) {
  const std::string run = kAugmentRun + "--augment flip,crop:4,translate:0.1,zoom:0.1,erase ";
  CommandResult a = run_keel("train " + run + "--stop-after-steps 6 --checkpoint-dir " + dir_ + "/straight");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  // Stopped mid-epoch after 3 steps (the pipeline's map threads have run ahead), then resumed: the
  // stored run keeps --augment, and the restored iterator continues with the same images.
  CommandResult b1 = run_keel("train " + run + "--stop-after-steps 3 --checkpoint-dir " + dir_ + "/split");
  ASSERT_EQ(b1.exit_code, 0) << b1.err;
  CommandResult b2 = run_keel("resume " + dir_ + "/split --stop-after-steps 3 --quiet");
  ASSERT_EQ(b2.exit_code, 0) << b2.err;
  for (const CommandResult* r : {&a, &b1, &b2}) {
    EXPECT_THAT(r->out, HasSubstr("Augmenting each training example (--augment flip,crop:4,translate:0.1,zoom:0.1,erase;"));
  }
  expect_bit_identical(dir_ + "/straight/ckpt-6.h5", dir_ + "/split/ckpt-6.h5", 200);

  // The augmentation acts: without it (or with another spec) the same 6 steps train other weights.
  for (const std::string& other : {std::string(""), std::string("--augment flip ")}) {
    const std::string name = other.empty() ? "plain" : "flip";
    CommandResult c = run_keel("train " + kAugmentRun + other + "--stop-after-steps 6 --checkpoint-dir " + dir_ + "/" + name);
    ASSERT_EQ(c.exit_code, 0) << c.err;
    EXPECT_EQ(c.out.find("Augmenting") != std::string::npos, !other.empty()) << c.out;
    EXPECT_NE(read_checkpoint_values(dir_ + "/" + name + "/ckpt-6.h5"), read_checkpoint_values(dir_ + "/straight/ckpt-6.h5"))
        << name;
  }
}

}  // namespace
}  // namespace keel::testing
