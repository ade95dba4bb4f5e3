// Explicit placement on the command line (issue 11): `keel train --layout PATTERN=AXES` (Keras 3's
// LayoutMap) makes Dense layers column-parallel and writes checkpoints bit-identical to the
// replicated run's; a run resumes under another layout exactly (checkpoints hold whole variables);
// `keel memory` plans it (JSON "layout") and equals what training measured; layouts keel cannot run
// exit 2 with one line naming what to change.
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

class LayoutCli : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("keel-layout"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

const std::string kLayoutRun = "train --model mlp --dataset fashion_mnist --device v3-8 --batch-per-core 4 --epochs 1 --seed 5 --quiet ";
const std::string kColumns = "--layout 'dense.*kernel=None,model' --layout 'dense.*bias=model' ";

TEST_F(LayoutCli, ColumnParallelTrainsToTheSameBitsAndResumesUnderAnyLayout) {
  const CommandResult plain = run_keel(kLayoutRun + "--stop-after-steps 12 --checkpoint-dir " + dir_ + "/plain");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const CommandResult columns = run_keel(kLayoutRun + kColumns + "--stop-after-steps 12 --checkpoint-dir " + dir_ + "/columns");
  ASSERT_EQ(columns.exit_code, 0) << columns.err;
  expect_bit_identical(dir_ + "/plain/ckpt-12.h5", dir_ + "/columns/ckpt-12.h5");
  const nlohmann::json state =
      nlohmann::json::parse(H5File::open_read(dir_ + "/columns/ckpt-12.h5").read_string("keel/train_state"));
  EXPECT_EQ(state["config"]["layout"], (nlohmann::json{"dense.*kernel=None,model", "dense.*bias=model"}));
  EXPECT_EQ(state["memory"]["layout"], state["config"]["layout"]);
  // 4 steps laid out, 4 replicated, 4 with the kernels alone laid out: 12 replicated steps.
  const std::string split = dir_ + "/split";
  ASSERT_EQ(run_keel(kLayoutRun + kColumns + "--stop-after-steps 4 --checkpoint-dir " + split).exit_code, 0);
  const CommandResult second = run_keel("resume " + split + " --stop-after-steps 4 --layout none --quiet");
  ASSERT_EQ(second.exit_code, 0) << second.err;
  const CommandResult third = run_keel("resume " + split + " --stop-after-steps 4 --layout 'kernel=None,model' --quiet");
  ASSERT_EQ(third.exit_code, 0) << third.err;
  expect_bit_identical(dir_ + "/plain/ckpt-12.h5", split + "/ckpt-12.h5");
  // What training measured equals the plan of the run's own configuration.
  const CommandResult memory = run_keel("memory " + dir_ + "/columns --json");
  ASSERT_EQ(memory.exit_code, 0) << memory.err;
  const nlohmann::json j = nlohmann::json::parse(memory.out);
  EXPECT_EQ(j["layout"], state["config"]["layout"]);
  EXPECT_EQ(j["plan_equals_measured"], true);
}

// A pattern that backtracking would take hours to search is matched in polynomial time (or refused),
// and `keel memory RUN` plans the run's own layout, refusing a new one.
TEST_F(LayoutCli, HostilePatternsEndQuickly) {
  const CommandResult r = run_keel("memory --model mlp --device v3-8 --layout '(.*)*(.*)*(.*)*(.*)*(.*)*!=None,model'");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("matches no variable"));
  ASSERT_EQ(run_keel(kLayoutRun + "--stop-after-steps 1 --checkpoint-dir " + dir_ + "/run").exit_code, 0);
  const CommandResult again = run_keel("memory " + dir_ + "/run --layout 'dense.*kernel=None,model'");
  EXPECT_EQ(again.exit_code, 2) << again.err;
}

// Mixed precision: the column-parallel layer rounds as the replicated one does.
TEST_F(LayoutCli, MixedPrecisionTrainsToTheSameBits) {
  const std::string mixed = kLayoutRun + "--precision mixed_bfloat16 --stop-after-steps 8 ";
  ASSERT_EQ(run_keel(mixed + "--checkpoint-dir " + dir_ + "/plain").exit_code, 0);
  const CommandResult columns = run_keel(mixed + kColumns + "--checkpoint-dir " + dir_ + "/columns");
  ASSERT_EQ(columns.exit_code, 0) << columns.err;
  expect_bit_identical(dir_ + "/plain/ckpt-8.h5", dir_ + "/columns/ckpt-8.h5");
  const CommandResult memory = run_keel("memory " + dir_ + "/columns --json");
  ASSERT_EQ(memory.exit_code, 0) << memory.err;
  EXPECT_EQ(nlohmann::json::parse(memory.out)["plan_equals_measured"], true);
}

// The plan: each core holds its columns only.
TEST_F(LayoutCli, MemoryPlansEachCoresColumns) {
  const std::string args = "memory --model mlp --device v3-8 --batch-per-core 16 --json ";
  const CommandResult plain = run_keel(args);
  const CommandResult columns = run_keel(args + kColumns);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(columns.exit_code, 0) << columns.err;
  const nlohmann::json p = nlohmann::json::parse(plain.out), c = nlohmann::json::parse(columns.out);
  for (size_t core = 0; core < 8; ++core) {
    EXPECT_LE(c["per_core"][core]["parameters"].get<int64_t>() * 7, p["per_core"][core]["parameters"].get<int64_t>());
    EXPECT_LE(c["per_core"][core]["optimizer"].get<int64_t>() * 7, p["per_core"][core]["optimizer"].get<int64_t>());
    EXPECT_LT(c["per_core"][core]["peak"].get<int64_t>(), p["per_core"][core]["peak"].get<int64_t>());
  }
}

TEST_F(LayoutCli, WhatItCannotRunExits2WithOneLine) {
  const std::string out = "--stop-after-steps 1 --checkpoint-dir " + dir_ + "/bad ";
  for (const std::string flags :
       {"--model resnet18 --layout 'conv1_conv/kernel=None,None,None,model'", "--layout 'dense=model'",
        "--layout 'dense.*kernel=None,model' --shard optimizer", "--layout 'dense.*kernel=None,batch'",
        "--layout 'dense.*kernel'",
        "--layout '(=None,model'", "--layout 'dens.*kernl=None,model'", "--layout '(.*)*(.*)*\\1=None,model'"}) {
    const CommandResult r = run_keel("train --device v3-8 --epochs 1 --quiet " + out + flags);
    EXPECT_EQ(r.exit_code, 2) << flags << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("layout")) << flags;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << flags << ": " << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir_ + "/bad/latest")) << flags;
  }
}

}  // namespace
}  // namespace keel::testing
