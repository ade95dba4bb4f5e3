// The memory savers on the command line (issue 11): `keel train --shard optimizer|gradients
// --remat segments` writes checkpoints bit-identical to the plain run's, a run resumes under other
// savers exactly, `keel memory` plans each (JSON "shard", "remat"), the plan equals what training
// measured, `--suggest` ranks every combination, exit 3's report names one that fits, and bad values
// exit 2.
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

class SaversCli : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("keel-savers"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

const std::string kSaversRun = "train --model mlp --dataset fashion_mnist --device v3-8 --batch-per-core 4 --epochs 1 --seed 5 --quiet ";

TEST_F(SaversCli, EveryModeTrainsToTheSameBits) {
  for (const std::string mode : {"none", "optimizer", "gradients", "full"}) {
    const CommandResult r = run_keel(kSaversRun + "--stop-after-steps 12 --shard " + mode + " --checkpoint-dir " + dir_ + "/" + mode);
    ASSERT_EQ(r.exit_code, 0) << mode << ": " << r.err;
  }
  const CommandResult remat = run_keel(kSaversRun + "--stop-after-steps 12 --remat segments --shard gradients --checkpoint-dir " +
                                       dir_ + "/remat");
  ASSERT_EQ(remat.exit_code, 0) << remat.err;
  expect_bit_identical(dir_ + "/none/ckpt-12.h5", dir_ + "/optimizer/ckpt-12.h5");
  expect_bit_identical(dir_ + "/none/ckpt-12.h5", dir_ + "/gradients/ckpt-12.h5");
  expect_bit_identical(dir_ + "/none/ckpt-12.h5", dir_ + "/full/ckpt-12.h5");
  expect_bit_identical(dir_ + "/none/ckpt-12.h5", dir_ + "/remat/ckpt-12.h5");
  // Keras's per-layer modes too (the MLP's first Dense is "dense"; the head never is rematerialised).
  const CommandResult layers = run_keel(kSaversRun + "--stop-after-steps 12 --remat layers:dense --checkpoint-dir " + dir_ + "/layers");
  ASSERT_EQ(layers.exit_code, 0) << layers.err;
  expect_bit_identical(dir_ + "/none/ckpt-12.h5", dir_ + "/layers/ckpt-12.h5");
  EXPECT_EQ(nlohmann::json::parse(H5File::open_read(dir_ + "/layers/ckpt-12.h5").read_string("keel/train_state"))["config"]["remat"],
            "layers:dense");
  const nlohmann::json remat_state =
      nlohmann::json::parse(H5File::open_read(dir_ + "/remat/ckpt-12.h5").read_string("keel/train_state"));
  EXPECT_EQ(remat_state["config"]["remat"], "segments");
  const nlohmann::json state =
      nlohmann::json::parse(H5File::open_read(dir_ + "/gradients/ckpt-12.h5").read_string("keel/train_state"));
  EXPECT_EQ(state["config"]["shard"], "gradients");
  EXPECT_EQ(state["memory"]["shard"], "gradients");
  // What training measured equals the plan of the run's own configuration, sharding included.
  const CommandResult memory = run_keel("memory " + dir_ + "/gradients --json");
  ASSERT_EQ(memory.exit_code, 0) << memory.err;
  const nlohmann::json j = nlohmann::json::parse(memory.out);
  EXPECT_EQ(j["shard"], "gradients");
  EXPECT_EQ(j["plan_equals_measured"], true);
}

// Checkpoints hold whole variables, so a run started under one sharding continues under another:
// 4 steps with ZeRO-2, 4 with none, 4 with ZeRO-1 equal 12 replicated steps.
TEST_F(SaversCli, ResumesUnderAnotherShardingBitIdentical) {
  const CommandResult straight = run_keel(kSaversRun + "--stop-after-steps 12 --checkpoint-dir " + dir_ + "/straight");
  ASSERT_EQ(straight.exit_code, 0) << straight.err;
  const std::string split = dir_ + "/split";
  const CommandResult first = run_keel(kSaversRun + "--stop-after-steps 4 --shard gradients --checkpoint-dir " + split);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const CommandResult second = run_keel("resume " + split + " --stop-after-steps 4 --shard none --quiet");
  ASSERT_EQ(second.exit_code, 0) << second.err;
  const CommandResult third = run_keel("resume " + split + " --stop-after-steps 4 --shard optimizer --quiet");
  ASSERT_EQ(third.exit_code, 0) << third.err;
  expect_bit_identical(dir_ + "/straight/ckpt-12.h5", split + "/ckpt-12.h5");
  const nlohmann::json state = nlohmann::json::parse(H5File::open_read(split + "/ckpt-12.h5").read_string("keel/train_state"));
  EXPECT_EQ(state["config"]["shard"], "optimizer") << "the sharding it last ran under";
}

nlohmann::json memory_json(const std::string& args) {
  const CommandResult r = run_keel("memory " + args + " --json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

TEST(SaversMemoryCli, PlansEachModeAndFindsALargerBatch) {
  const std::string model = "--model resnet18 --input-shape 32x32x1 --cores 8 --hbm-per-core 256MiB --batch-per-core 16";
  const nlohmann::json none = memory_json(model);
  const nlohmann::json zero1 = memory_json(model + " --shard optimizer");
  const nlohmann::json zero2 = memory_json(model + " --shard gradients");
  const nlohmann::json zero3 = memory_json(model + " --shard full");
  EXPECT_EQ(none["shard"], "none");
  EXPECT_EQ(zero2["shard"], "gradients");
  for (int c = 0; c < 8; ++c) {
    const auto at = [c](const nlohmann::json& j, const char* f) { return j["per_core"][c][f].get<int64_t>(); };
    EXPECT_LE(at(zero1, "optimizer"), at(none, "optimizer") / 8 + 64 * 100) << c;
    EXPECT_EQ(at(zero1, "gradients"), at(none, "gradients")) << c;
    EXPECT_LE(at(zero2, "gradients"), at(none, "gradients") / 8 + 64 * 100) << c;
    EXPECT_EQ(at(zero2, "parameters"), at(none, "parameters")) << c;
    EXPECT_LE(at(zero3, "parameters"), at(none, "parameters") / 8 + 64 * 200) << c;
    EXPECT_LT(at(zero3, "peak"), at(zero2, "peak")) << c;
    EXPECT_LT(at(zero2, "peak"), at(none, "peak")) << c;
  }
  const int64_t max_none = memory_json(model + " --max-batch")["max_batch_per_core"].get<int64_t>();
  const int64_t max_zero2 = memory_json(model + " --max-batch --shard gradients")["max_batch_per_core"].get<int64_t>();
  EXPECT_GT(max_zero2, max_none) << "the bytes sharding frees hold a larger batch";
  const CommandResult text = run_keel("memory " + model + " --shard optimizer");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr(", --shard optimizer, one training step"));
  const nlohmann::json remat = memory_json(model + " --remat segments");
  EXPECT_EQ(remat["remat"], "segments");
  EXPECT_LT(remat["per_core"][0]["activations"].get<int64_t>(), none["per_core"][0]["activations"].get<int64_t>());
}

// --suggest plans every combination; those that fit come first, cheapest first; each entry's peak
// is what `keel memory` with its flags plans.
TEST(SaversMemoryCli, SuggestRanksEveryCombination) {
  const std::string model = "--model resnet18 --input-shape 32x32x1 --cores 8 --hbm-per-core 256MiB --batch-per-core 64";
  const nlohmann::json j = memory_json(model + " --suggest");
  ASSERT_TRUE(j["suggestions"].is_array());
  ASSERT_EQ(j["suggestions"].size(), 16u) << "2 precisions x 2 remat modes x 4 sharding modes";
  bool fits_seen_after_not = false, not_fitting = false;
  for (const nlohmann::json& s : j["suggestions"]) {
    if (!s["fits"].get<bool>()) not_fitting = true;
    if (s["fits"].get<bool>() && not_fitting) fits_seen_after_not = true;
    std::string flags;
    if (s["shard"] != "none") flags += " --shard " + s["shard"].get<std::string>();
    if (s["remat"] != "none") flags += " --remat " + s["remat"].get<std::string>();
    if (s["precision"] != "float32") flags += " --precision " + s["precision"].get<std::string>();
    EXPECT_EQ(s["flags"], flags.empty() ? "(none)" : flags.substr(1));
    const nlohmann::json plan = memory_json(model + flags);
    int64_t peak = 0;
    for (const nlohmann::json& c : plan["per_core"]) peak = std::max(peak, c["peak"].get<int64_t>());
    EXPECT_EQ(s["peak"].get<int64_t>(), peak) << s.dump();
    EXPECT_EQ(s["fits"], plan["fits"]) << s.dump();
    EXPECT_TRUE(s["max_batch_per_core"].is_number_integer()) << s.dump();
    EXPECT_EQ(s["remat"] == "segments", s["recompute_fraction"].get<double>() > 0.0) << s.dump();
  }
  EXPECT_FALSE(fits_seen_after_not) << j["suggestions"].dump();
  const CommandResult text = run_keel("memory " + model + " --suggest");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("cheapest first (keel memory --suggest)"));
}

// A training run that does not fit exits 3 before allocating, and its report ends with savers that
// would make the batch fit.
TEST_F(SaversCli, ExhaustedReportEndsWithWhatWouldFit) {
  const std::string model = "--model resnet18 --input-shape 32x32x1 --cores 8 --hbm-per-core 256MiB";
  const nlohmann::json suggestions = memory_json(model + " --batch-per-core 1 --suggest")["suggestions"];
  int64_t best = 0, plain = 0;
  for (const nlohmann::json& s : suggestions) {
    best = std::max(best, s["max_batch_per_core"].get<int64_t>());
    if (s["flags"] == "(none)") plain = s["max_batch_per_core"].get<int64_t>();
  }
  ASSERT_GT(best, plain + 1) << suggestions.dump();
  const CommandResult r = run_keel("train " + model + " --batch-per-core " + std::to_string(plain + 1) +
                                   " --epochs 1 --quiet --checkpoint-dir " + dir_ + "/big");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("The cheapest savers that fit " + std::to_string(plain + 1) + " per core: --"));
}

TEST(SaversMemoryCli, BadValuesExitTwo) {
  for (const std::string verb : {"memory --model mlp", "train --model mlp --epochs 1 --quiet --checkpoint-dir /nonexistent/x"}) {
    const CommandResult remat = run_keel(verb + " --remat sometimes");
    EXPECT_EQ(remat.exit_code, 2) << verb;
    EXPECT_THAT(remat.err, HasSubstr("--remat: unknown remat mode 'sometimes' (known: none, segments, full, "
                                     "larger_than:BYTES, layers:REGEX)")) << verb;
    const CommandResult regex = run_keel(verb + " --remat 'layers:conv(' ");
    EXPECT_EQ(regex.exit_code, 2) << verb;
    EXPECT_THAT(regex.err, HasSubstr("bad regular expression 'conv('")) << verb;
    const CommandResult bad = run_keel(verb + " --shard zero2");
    EXPECT_EQ(bad.exit_code, 2) << verb;
    EXPECT_THAT(bad.err, HasSubstr("--shard: unknown sharding 'zero2' (known: none, optimizer, gradients, full)")) << verb;
  }
  const CommandResult help = run_keel("train --help");
  EXPECT_THAT(help.out, HasSubstr("--shard"));
}

}  // namespace
}  // namespace keel::testing
