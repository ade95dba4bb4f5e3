// Pod slices in one process (issue 12, item 1): `keel memory` per core and per host, a training run
// on a slice preset that resumes bit-identically and records its hosts, and bad --hosts (exit 2).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "framework/checkpoint/h5_file.h"
#include "framework/device/ledger.h"
#include "tests/support/checkpoint_state.h"
#include "tests/support/cli_runner.h"

namespace keel::testing {
namespace {

using ::testing::HasSubstr;

nlohmann::json slices_memory_json(const std::string& args) {
  const CommandResult r = run_keel("memory " + args + " --json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

// Each host's figures are the sums of its own cores', and its cores are the consecutive global ids.
void expect_hosts_sum_their_cores(const nlohmann::json& j, int hosts, int cores_per_host) {
  ASSERT_EQ(j["hosts"], hosts);
  ASSERT_EQ(j["cores_per_host"], cores_per_host);
  ASSERT_EQ(j["per_core"].size(), static_cast<size_t>(hosts * cores_per_host));
  ASSERT_EQ(j["per_host"].size(), static_cast<size_t>(hosts));
  std::vector<std::string> fields = {"peak", "sent_bytes", "received_bytes"};
  for (int k = 0; k < kNumCategories; ++k) fields.emplace_back(category_name(static_cast<Category>(k)));
  for (int h = 0; h < hosts; ++h) {
    const nlohmann::json& host = j["per_host"][h];
    EXPECT_EQ(host["host"], h);
    ASSERT_EQ(host["cores"].size(), static_cast<size_t>(cores_per_host));
    EXPECT_EQ(host["hbm_bytes"], j["hbm_bytes_per_core"].get<int64_t>() * cores_per_host);
    for (const std::string& f : fields) {
      int64_t sum = 0;
      for (int i = 0; i < cores_per_host; ++i) {
        const int core = h * cores_per_host + i;
        EXPECT_EQ(host["cores"][i], core);
        sum += j["per_core"][core][f].get<int64_t>();
      }
      EXPECT_EQ(host[f].get<int64_t>(), sum) << "host " << h << " " << f;
    }
  }
}

TEST(SlicesCli, MemoryJsonOnV3_32IsPerCoreAndPerHost) {
  const nlohmann::json j = slices_memory_json("--model mlp --device v3-32 --batch-per-core 16");
  // The contract fields, as on v3-8.
  EXPECT_EQ(j["device"], "v3-32");
  EXPECT_EQ(j["cores"], 32);
  EXPECT_EQ(j["hbm_bytes_per_core"], int64_t{16} << 30);
  EXPECT_EQ(j["batch_per_core"], 16);
  EXPECT_EQ(j["fits"], true);
  EXPECT_TRUE(j["max_batch_per_core"].is_null());
  expect_hosts_sum_their_cores(j, 4, 8);
  const nlohmann::json v3_8 = slices_memory_json("--model mlp --device v3-8 --batch-per-core 16");
  EXPECT_EQ(v3_8["hosts"], 1);
  EXPECT_EQ(v3_8["per_host"].size(), 1u);
  // A core holds what it holds on one host: the same parameters, optimizer state and inputs.
  for (const char* f : {"parameters", "gradients", "optimizer", "inputs"}) {
    EXPECT_EQ(j["per_core"][31][f], v3_8["per_core"][0][f]) << f;
  }
  EXPECT_EQ(j["per_host"][2]["parameters"], 8 * 407080);
}

TEST(SlicesCli, MemoryJsonOnV4_32AndACustomSlice) {
  const nlohmann::json v4 = slices_memory_json("--model mlp --device v4-32 --batch-per-core 8");
  EXPECT_EQ(v4["cores"], 16);
  EXPECT_EQ(v4["hbm_bytes_per_core"], int64_t{32} << 30);
  expect_hosts_sum_their_cores(v4, 4, 4);
  expect_hosts_sum_their_cores(slices_memory_json("--model mlp --hosts 3 --cores 6 --hbm-per-core 64MiB --batch-per-core 4"), 3, 2);
}

TEST(SlicesCli, MemoryTextShowsEachHost) {
  const CommandResult r = run_keel("memory --model mlp --device v3-32 --batch-per-core 16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("(32 cores x 16.00 GiB, 4 hosts x 8)"));
  EXPECT_THAT(r.out, HasSubstr("Per host (4 hosts x 8 cores; sums of its cores):"));
  const nlohmann::json j = slices_memory_json("--model mlp --device v3-32 --batch-per-core 16");
  for (int h = 0; h < 4; ++h) {
    const std::string cores = std::to_string(8 * h) + "-" + std::to_string(8 * h + 7);
    EXPECT_THAT(r.out, ::testing::ContainsRegex("\n" + std::to_string(h) + " +" + cores + " +" +
                                                std::to_string(j["per_host"][h]["parameters"].get<int64_t>()) + " "));
  }
  const CommandResult one = run_keel("memory --model mlp --device v3-8 --batch-per-core 16");
  EXPECT_THAT(one.out, ::testing::Not(HasSubstr("Per host")));
  const CommandResult help = run_keel("memory --help");
  EXPECT_THAT(help.out, HasSubstr("--hosts"));
  EXPECT_THAT(help.out, ::testing::ContainsRegex("v3-32[ \n]+\\(4x8\\)"));
  EXPECT_THAT(help.out, HasSubstr("each host's sums"));
}

TEST(SlicesCli, ModelsListsThePresetsWithTheirHosts) {
  const CommandResult r = run_keel("models");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("v3-32         4 hosts x   8 cores  16.00 GiB per core"));
  EXPECT_THAT(r.out, HasSubstr("v4-32         4 hosts x   4 cores  32.00 GiB per core"));
  EXPECT_THAT(r.out, HasSubstr("v3-8          1 host  x   8 cores  16.00 GiB per core"));
  const CommandResult json = run_keel("models --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_TRUE(nlohmann::json::parse(json.out).is_array()) << "--json stays the zoo's array (contract)";
}

TEST(SlicesCli, BadHostsExitTwoSayingWhichWork) {
  for (const std::string verb : {"memory --model mlp", "train --model mlp --epochs 1 --quiet --checkpoint-dir /nonexistent/x"}) {
    const CommandResult r = run_keel(verb + " --hosts 3 --cores 16 --hbm-per-core 1GiB");
    EXPECT_EQ(r.exit_code, 2) << verb;
    EXPECT_THAT(r.err, HasSubstr("--hosts must divide the 16 cores, got 3 (hosts that work: 1, 2, 4, 8, 16)")) << verb;
  }
  const CommandResult both = run_keel("memory --model mlp --device v3-32 --hosts 2");
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_THAT(both.err, HasSubstr("not both"));
  const CommandResult zero = run_keel("memory --model mlp --hosts 0 --cores 4 --hbm-per-core 1GiB");
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_THAT(zero.err, HasSubstr("--hosts"));
}

class SlicesTrainCli : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("keel-slices"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

// One process simulates the 32 cores of a v3-32: 3 steps straight equal 1 step + resume + 2 steps,
// bit for bit; the checkpoint records the slice, and resume/evaluate rebuild it.
TEST_F(SlicesTrainCli, V3_32TrainsResumesBitIdenticalAndRecordsItsHosts) {
  const std::string run = "train --model mlp --dataset fashion_mnist --device v3-32 --batch-per-core 2 --epochs 1 --seed 3 --quiet ";
  const CommandResult straight = run_keel(run + "--stop-after-steps 3 --checkpoint-dir " + dir_ + "/straight");
  ASSERT_EQ(straight.exit_code, 0) << straight.err;
  const CommandResult first = run_keel(run + "--stop-after-steps 1 --checkpoint-dir " + dir_ + "/split");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const CommandResult rest = run_keel("resume " + dir_ + "/split --stop-after-steps 2 --quiet");
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  expect_bit_identical(dir_ + "/straight/ckpt-3.h5", dir_ + "/split/ckpt-3.h5");

  const nlohmann::json state =
      nlohmann::json::parse(H5File::open_read(dir_ + "/split/ckpt-3.h5").read_string("keel/train_state"));
  const nlohmann::json& device = state["config"]["device"];
  EXPECT_EQ(device["name"], "v3-32");
  EXPECT_EQ(device["cores"], 32);
  EXPECT_EQ(device["hosts"], 4);
  EXPECT_EQ(state["memory"]["hosts"], 4);
  EXPECT_EQ(state["memory"]["per_core"].size(), 32u);

  const CommandResult eval = run_keel("evaluate " + dir_ + "/split --json");
  ASSERT_EQ(eval.exit_code, 0) << eval.err;
  EXPECT_EQ(nlohmann::json::parse(eval.out)["samples"], 10000);
  const CommandResult plan = run_keel("memory " + dir_ + "/split --json");
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const nlohmann::json p = nlohmann::json::parse(plan.out);
  EXPECT_EQ(p["device"], "v3-32");
  expect_hosts_sum_their_cores(p, 4, 8);
}

}  // namespace
}  // namespace keel::testing
