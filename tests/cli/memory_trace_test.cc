// `keel memory --trace FILE.json --report FILE.html`, end to end: the trace's counters and the page's
// embedded numbers equal `keel memory --json`'s (peak per core and per category, budget), for the MLP
// and a ResNet, on v3-8 and cpu, and for a run's own plan; the instant events add up to the counters.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/cli_runner.h"

namespace keel::testing {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

const char* const kCategories[] = {"parameters", "gradients", "optimizer", "activations", "inputs", "workspace"};

// The JSON block the page draws from.
nlohmann::json page_data(const std::string& html) {
  const std::string open = "<script type=\"application/json\" id=\"keel-memory-data\">";
  const size_t begin = html.find(open);
  EXPECT_NE(begin, std::string::npos);
  const size_t end = html.find("</script>", begin);
  if (begin == std::string::npos || end == std::string::npos) return nullptr;
  return nlohmann::json::parse(html.substr(begin + open.size(), end - begin - open.size()));
}

// Per core (pid - 1) and counter name, the largest value the trace's counter track reaches.
std::map<int, std::map<std::string, int64_t>> counter_maxima(const nlohmann::json& trace) {
  std::map<int, std::map<std::string, int64_t>> out;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    if (e["ph"] != "C") continue;
    int64_t& m = out[e["pid"].get<int>() - 1][e["name"].get<std::string>()];
    m = std::max(m, e["args"]["bytes"].get<int64_t>());
  }
  return out;
}

// Replays the instant events' bytes (+charge, -release) per core; each must land on the "total"
// counter at the same position.
void expect_instants_add_up_to_the_counters(const nlohmann::json& trace) {
  std::map<int, int64_t> in_use, total;
  std::map<int, int> charges;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    const int pid = e["pid"].get<int>();
    if (e["ph"] == "i" && e.contains("args")) {
      const std::string kind = e["args"]["event"];
      const int64_t bytes = e["args"]["bytes"];
      EXPECT_THAT(e["name"].get<std::string>(), HasSubstr(e["args"]["owner"].get<std::string>()));
      EXPECT_THAT(e["name"].get<std::string>(), HasSubstr(std::to_string(bytes) + " B"));
      if (kind == "charge") in_use[pid] += bytes, ++charges[pid];
      if (kind == "release") in_use[pid] -= bytes;
      EXPECT_EQ(e["args"]["in_use_bytes"].get<int64_t>(), in_use[pid]) << e.dump();
    } else if (e["ph"] == "C" && e["name"] == "total") {
      total[pid] = e["args"]["bytes"];
      EXPECT_EQ(total[pid], in_use[pid]) << e.dump();
    }
  }
  for (const auto& [pid, n] : charges) EXPECT_GT(n, 0) << "pid " << pid;
}

// Each core is a named process (pid core + 1) with a named thread for its allocations.
void expect_named_processes(const nlohmann::json& trace, size_t cores) {
  std::map<int, std::string> process, thread;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    if (e["ph"] != "M") continue;
    if (e["name"] == "process_name") process[e["pid"].get<int>()] = e["args"]["name"];
    if (e["name"] == "thread_name") thread[e["tid"].get<int>()] = e["args"]["name"];
  }
  ASSERT_EQ(process.size(), cores);
  for (size_t c = 0; c < cores; ++c) {
    const int pid = static_cast<int>(c) + 1;
    EXPECT_THAT(process[pid], HasSubstr("core " + std::to_string(c) + " ("));
    EXPECT_EQ(thread[pid], "allocations");
  }
}

class MemoryTrace : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("keel-memory-trace"); }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `keel memory ARGS --json --trace --report` and checks both files against the JSON.
  nlohmann::json check(const std::string& args) {
    const std::string trace_path = dir_ + "/step.json", page_path = dir_ + "/step.html";
    CommandResult r = run_keel("memory " + args + " --json --trace " + trace_path + " --report " + page_path);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    if (r.exit_code != 0) return nullptr;
    const nlohmann::json j = nlohmann::json::parse(r.out);  // --json's stdout is the object alone
    const nlohmann::json trace = nlohmann::json::parse(read_file(trace_path));
    const nlohmann::json page = page_data(read_file(page_path));
    const auto maxima = counter_maxima(trace);
    EXPECT_EQ(trace["otherData"]["hbm_bytes_per_core"], j["hbm_bytes_per_core"]);
    EXPECT_EQ(page["hbm_bytes_per_core"], j["hbm_bytes_per_core"]);
    EXPECT_EQ(page["device"], j["device"]);
    EXPECT_EQ(page["batch_per_core"], j["batch_per_core"]);
    EXPECT_EQ(page["fits"], j["fits"]);
    // The page's suggestions are --suggest's, and there are none without it.
    EXPECT_EQ(page["suggestions"], j.contains("suggestions") ? j["suggestions"] : nlohmann::json(nullptr));
    EXPECT_EQ(maxima.size(), j["per_core"].size());
    EXPECT_EQ(page["per_core"].size(), j["per_core"].size());
    for (size_t c = 0; c < j["per_core"].size(); ++c) {
      const nlohmann::json& want = j["per_core"][c];
      const auto& counters = maxima.at(static_cast<int>(c));
      for (const char* k : kCategories) {
        EXPECT_EQ(counters.at(k), want[k].get<int64_t>()) << "trace, core " << c << " " << k;
        EXPECT_EQ(page["per_core"][c][k], want[k]) << "page, core " << c << " " << k;
      }
      EXPECT_EQ(counters.at("total"), want["peak"].get<int64_t>()) << "trace, core " << c;
      EXPECT_EQ(page["per_core"][c]["peak"], want["peak"]) << "page, core " << c;
      expect_largest_at_peak(page["per_core"][c]);
    }
    expect_instants_add_up_to_the_counters(trace);
    expect_named_processes(trace, j["per_core"].size());
    expect_self_contained(read_file(page_path));
    return page;
  }

  // The live allocations listed at the peak fit in it, largest first, and the drawn series reaches it.
  static void expect_largest_at_peak(const nlohmann::json& core) {
    int64_t sum = 0, previous = INT64_MAX;
    ASSERT_FALSE(core["largest_at_peak"].empty());
    for (const nlohmann::json& a : core["largest_at_peak"]) {
      EXPECT_LE(a["bytes"].get<int64_t>(), previous);
      previous = a["bytes"];
      sum += previous;
    }
    EXPECT_LE(sum, core["peak"].get<int64_t>());
    int64_t drawn = 0;
    const nlohmann::json& s = core["series"];
    for (size_t i = 0; i < s["position"].size(); ++i) {
      int64_t t = 0;
      for (const char* k : kCategories) t += s[k][i].get<int64_t>();
      drawn = std::max(drawn, t);
    }
    EXPECT_EQ(drawn, core["peak"].get<int64_t>());
  }

  static void expect_self_contained(const std::string& html) {
    for (const char* external : {"src=", "href=", "@import", "url(", "fetch(", "XMLHttpRequest"}) {
      EXPECT_EQ(html.find(external), std::string::npos) << external;
    }
  }

  std::string dir_;
};

TEST_F(MemoryTrace, MlpOnV3_8) {
  const nlohmann::json page = check("--model mlp --device v3-8 --batch-per-core 16");
  ASSERT_TRUE(page.is_object());
  // The largest allocation at the peak is a copy of the first kernel (784 x 128 floats).
  EXPECT_EQ(page["per_core"][0]["largest_at_peak"][0]["bytes"], 784 * 128 * 4);
  std::vector<std::string> phases;
  for (const nlohmann::json& p : page["per_core"][0]["phases"]) phases.push_back(p["label"]);
  EXPECT_EQ(phases, (std::vector<std::string>{"build", "prefetch", "train_step", "forward", "backward", "apply_gradients"}));
}

TEST_F(MemoryTrace, MlpOnCpu) { check("--model mlp --device cpu --batch-per-core 32"); }

TEST_F(MemoryTrace, WithSuggestionsThePageListsThem) {
  const nlohmann::json page = check("--model mlp --device v3-8 --batch-per-core 16 --suggest");
  ASSERT_TRUE(page.is_object());
  ASSERT_TRUE(page["suggestions"].is_array());
  EXPECT_EQ(page["suggestions"].size(), 16u);
  EXPECT_EQ(page["suggestions"][0]["flags"], "(none)") << "everything fits; mirroring moves the fewest bytes";
}

TEST_F(MemoryTrace, Resnet18OnV3_8AndCpu) {
  check("--model resnet18 --input-shape 32x32x1 --device v3-8 --batch-per-core 4");
  check("--model resnet18 --input-shape 32x32x1 --device cpu --batch-per-core 8");
}

TEST_F(MemoryTrace, Resnet50ThatDoesNotFit) {
  const nlohmann::json page = check("--model resnet50 --input-shape 64x64x3 --cores 2 --hbm-per-core 64MiB --batch-per-core 8");
  ASSERT_TRUE(page.is_object());
  EXPECT_EQ(page["fits"], false);
}

TEST_F(MemoryTrace, ARunsOwnPlan) {
  CommandResult t = run_keel("train --model mlp --device v3-8 --batch-per-core 16 --epochs 1 --stop-after-steps 2 --quiet "
                             "--checkpoint-dir " + dir_ + "/run");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  check(dir_ + "/run");
}

TEST_F(MemoryTrace, TextModeSaysWhereTheFilesAre) {
  CommandResult r = run_keel("memory --model mlp --device cpu --trace " + dir_ + "/t.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Trace: " + dir_ + "/t.json"));
  EXPECT_THAT(r.out, HasSubstr("Peak per core"));
  EXPECT_FALSE(fs::exists(dir_ + "/t.html"));
}

TEST_F(MemoryTrace, UnwritablePathsExitTwoNamingTheFlagBeforePlanning) {
  CommandResult missing = run_keel("memory --model mlp --device cpu --trace " + dir_ + "/no/such/dir/t.json");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("--trace"));
  EXPECT_THAT(missing.err, HasSubstr("no/such/dir/t.json"));
  CommandResult directory = run_keel("memory --model mlp --device cpu --report " + dir_);
  EXPECT_EQ(directory.exit_code, 2);
  EXPECT_THAT(directory.err, HasSubstr("--report"));
  CommandResult same = run_keel("memory --model mlp --device cpu --trace " + dir_ + "/x --report " + dir_ + "/x");
  EXPECT_EQ(same.exit_code, 2);
  EXPECT_TRUE(fs::is_empty(dir_));
}

}  // namespace
}  // namespace keel::testing
