// `--json` on every reporting verb (and `--log-format jsonl` on train/resume): the output parses and
// holds the fields README documents as the contract, with values that agree with the text output.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/cli_runner.h"

namespace keel::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class JsonOutput : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("keel-json"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

// Each line of `text` as a JSON object (a line that does not parse fails the test).
std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

void expect_fields(const nlohmann::json& j, const std::vector<std::string>& fields) {
  for (const std::string& f : fields) EXPECT_TRUE(j.contains(f)) << f << " missing from " << j.dump().substr(0, 400);
}

// The "Total params: 101,770" of the text summary, as a number.
int64_t total_params_of(const std::string& summary) {
  std::smatch m;
  const std::regex total("Total params: ([0-9,]+)");
  EXPECT_TRUE(std::regex_search(summary, m, total)) << summary;
  std::string digits = m[1];
  digits.erase(std::remove(digits.begin(), digits.end(), ','), digits.end());
  return std::stoll(digits);
}

TEST_F(JsonOutput, SummaryOfASequentialModel) {
  CommandResult r = run_keel("summary --model mlp --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  expect_fields(j, {"name", "class_name", "input_shape", "output_shape", "layers", "total_params", "trainable_params",
                    "non_trainable_params"});
  EXPECT_EQ(j["class_name"], "Sequential");
  EXPECT_EQ(j["input_shape"], nlohmann::json::parse("[null, 784]"));
  EXPECT_EQ(j["output_shape"], nlohmann::json::parse("[null, 10]"));
  ASSERT_EQ(j["layers"].size(), 2u);
  EXPECT_EQ(j["layers"][0], nlohmann::json::parse(R"({"name": "dense", "class_name": "Dense", "output_shape": [null, 128],
                                                      "params": 100480, "connected_to": []})"));
  EXPECT_EQ(j["layers"][1]["params"], 1290);
  EXPECT_EQ(j["total_params"], 101770);
  EXPECT_EQ(j["trainable_params"], 101770);
  EXPECT_EQ(j["non_trainable_params"], 0);
}

TEST_F(JsonOutput, SummaryOfAFunctionalModelHasItsConnections) {
  const std::string model = "summary --model resnet18 --input-shape 32x32x1 --classes 10";
  CommandResult text = run_keel(model);
  CommandResult r = run_keel(model + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["class_name"], "Functional");
  EXPECT_EQ(j["total_params"].get<int64_t>(), total_params_of(text.out));
  int64_t params = 0;
  bool saw_add = false;
  for (const nlohmann::json& layer : j["layers"]) {
    expect_fields(layer, {"name", "class_name", "output_shape", "params", "connected_to"});
    params += layer["params"].get<int64_t>();
    // Every row of the text table is there (whose cells wrap: the name alone is whole).
    std::string cell = " ";
    cell.append(layer["name"].get<std::string>()).append(" (");
    EXPECT_THAT(text.out, HasSubstr(cell));
    if (layer["class_name"] == "Add") {
      saw_add = true;
      EXPECT_EQ(layer["connected_to"].size(), 2u) << layer.dump();
    }
  }
  EXPECT_TRUE(saw_add);
  EXPECT_EQ(params, j["total_params"].get<int64_t>());
  EXPECT_EQ(j["layers"][0]["class_name"], "InputLayer");
  EXPECT_EQ(j["layers"][1]["connected_to"], nlohmann::json::parse(R"(["input_1[0][0]"])"));
  EXPECT_EQ(j["output_shape"], nlohmann::json::parse("[null, 10]"));
}

TEST_F(JsonOutput, Models) {
  CommandResult r = run_keel("models --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.is_array());
  std::vector<std::string> names;
  for (const nlohmann::json& m : j) {
    expect_fields(m, {"name", "default_input_shape", "description"});
    names.push_back(m["name"]);
  }
  for (const char* name : {"mlp", "resnet18", "resnet50", "resnet152"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
  EXPECT_EQ(j[0]["default_input_shape"], nlohmann::json::parse("[784]"));
  EXPECT_EQ(run_keel("models --csv").exit_code, 2);
}

// One object per epoch with every value history.csv holds, then the final one; stdout holds nothing else.
TEST_F(JsonOutput, TrainAndResumeLogJsonLines) {
  const std::string run = dir_ + "/run";
  CommandResult a = run_keel("train --model mlp --device cpu --batch-per-core 512 --validation-data test --epochs 3 "
                             "--stop-after-steps 150 --log-format jsonl --checkpoint-dir " + run);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  std::vector<nlohmann::json> lines = json_lines(a.out);
  ASSERT_EQ(lines.size(), 2u) << a.out;  // epoch 0 (117 steps), then stopped at 150
  EXPECT_EQ(lines[0]["event"], "epoch");
  EXPECT_EQ(lines[0]["epoch"], 0);
  EXPECT_EQ(lines[0]["step"], 117);
  expect_fields(lines[0], {"loss", "accuracy", "val_loss", "val_accuracy"});
  EXPECT_EQ(lines[1]["event"], "end");
  EXPECT_EQ(lines[1]["outcome"], "stopped");
  EXPECT_EQ(lines[1]["step"], 150);
  EXPECT_EQ(lines[1]["checkpoint"], run + "/ckpt-150.h5");
  EXPECT_EQ(lines[1]["exit_status"], 0);
  EXPECT_THAT(a.err, HasSubstr("Device cpu"));  // the text lines went to stderr

  CommandResult b = run_keel("resume " + run + " --log-format jsonl");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  lines = json_lines(b.out);
  ASSERT_EQ(lines.size(), 3u) << b.out;
  EXPECT_EQ(lines[0]["epoch"], 1);
  EXPECT_EQ(lines[1]["epoch"], 2);
  EXPECT_EQ(lines[1]["step"], 351);
  const nlohmann::json& end = lines[2];
  expect_fields(end, {"event", "outcome", "step", "run_dir", "checkpoint", "history", "exit_status"});
  EXPECT_EQ(end["outcome"], "completed");
  EXPECT_EQ(end["run_dir"], run);
  EXPECT_EQ(end["history"]["val_loss"].size(), 2u);
  EXPECT_EQ(end["history"]["loss"][1], lines[1]["loss"]);
  // The same values as history.csv's last row (Keras's CSVLogger: epoch, then the keys sorted).
  const std::string csv = read_file(run + "/history.csv");
  EXPECT_EQ(csv.substr(0, csv.find('\n')), "epoch,accuracy,loss,val_accuracy,val_loss");
  std::string last = csv.substr(0, csv.size() - 1);
  last = last.substr(last.rfind('\n') + 1);
  double epoch, accuracy, loss, val_accuracy, val_loss;
  ASSERT_EQ(std::sscanf(last.c_str(), "%lf,%lf,%lf,%lf,%lf", &epoch, &accuracy, &loss, &val_accuracy, &val_loss), 5);
  EXPECT_EQ(epoch, 2);
  EXPECT_DOUBLE_EQ(lines[1]["loss"].get<double>(), loss);
  EXPECT_DOUBLE_EQ(lines[1]["val_accuracy"].get<double>(), val_accuracy);

  CommandResult again = run_keel("resume " + run + " --log-format jsonl");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  lines = json_lines(again.out);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["outcome"], "nothing_to_do");
}

TEST_F(JsonOutput, AFailedRunEndsWithAnObjectAndItsExitStatus) {
  CommandResult r = run_keel("train --model mlp --device cpu --data-dir " + dir_ + "/none --log-format jsonl "
                             "--checkpoint-dir " + dir_ + "/run");
  EXPECT_EQ(r.exit_code, 2);
  const std::vector<nlohmann::json> lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 1u) << r.out;
  EXPECT_EQ(lines[0]["outcome"], "failed");
  EXPECT_EQ(lines[0]["exit_status"], 2);
  EXPECT_THAT(lines[0]["message"].get<std::string>(), HasSubstr(dir_ + "/none"));
  EXPECT_THAT(r.err, HasSubstr(dir_ + "/none"));  // the message, as without jsonl
  EXPECT_EQ(run_keel("train --model mlp --log-format xml --checkpoint-dir " + dir_ + "/x").exit_code, 2);
  // A diverging run (README: step 5 with this learning rate): exit 4, and the object says so.
  CommandResult d = run_keel("train --model mlp --device v3-8 --batch-per-core 16 --seed 1 --optimizer sgd --lr 1e7 "
                             "--epochs 1 --log-format jsonl --checkpoint-dir " + dir_ + "/diverged");
  EXPECT_EQ(d.exit_code, 4);
  const std::vector<nlohmann::json> diverged = json_lines(d.out);
  ASSERT_EQ(diverged.size(), 1u) << d.out;
  EXPECT_EQ(diverged[0]["exit_status"], 4);
  EXPECT_THAT(diverged[0]["message"].get<std::string>(), HasSubstr("training diverged at step 5"));
}

TEST_F(JsonOutput, DataExport) {
  const std::string out = dir_ + "/png";
  CommandResult r = run_keel("data export --format png --split test --json --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  expect_fields(j, {"format", "source", "image_shape", "class_names", "splits", "out", "examples", "bytes"});
  EXPECT_EQ(j["format"], "png");
  EXPECT_EQ(j["out"], out);
  EXPECT_EQ(j["examples"], 10000);
  EXPECT_EQ(j["splits"]["test"]["examples"], 10000);
  EXPECT_EQ(j["class_names"].size(), 10u);
  uintmax_t bytes = 0;
  for (const auto& e : fs::recursive_directory_iterator(out)) bytes += e.is_regular_file() ? e.file_size() : 0;
  EXPECT_EQ(j["bytes"].get<uintmax_t>(), bytes);
  // What it printed is what dataset_info.json says, plus where and how much.
  nlohmann::json info = j;
  for (const char* key : {"out", "examples", "bytes"}) info.erase(key);
  EXPECT_EQ(info, nlohmann::json::parse(read_file(out + "/dataset_info.json")));
}

// The verbs that had --json before (evaluate, memory) and predict, on one run: each parses with its fields.
TEST_F(JsonOutput, EvaluateMemoryAndPredict) {
  const std::string run = dir_ + "/run";
  ASSERT_EQ(run_keel("train --model mlp --device cpu --batch-per-core 512 --epochs 1 --stop-after-steps 5 --quiet "
                     "--checkpoint-dir " + run).exit_code, 0);
  CommandResult e = run_keel("evaluate " + run + " --json");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  expect_fields(nlohmann::json::parse(e.out), {"loss", "accuracy", "samples", "training_memory", "inference_memory",
                                               "checkpoint_bytes", "params"});
  // --steps N (Keras's evaluate(steps=N)): the first N batches of 512; more than there are: all 10,000.
  CommandResult first = run_keel("evaluate " + run + " --steps 3 --json");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(nlohmann::json::parse(first.out)["samples"], 3 * 512);
  CommandResult all = run_keel("evaluate " + run + " --steps 1000 --json");
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(nlohmann::json::parse(all.out)["samples"], 10000);
  EXPECT_EQ(nlohmann::json::parse(all.out)["loss"], nlohmann::json::parse(e.out)["loss"]);
  CommandResult zero = run_keel("evaluate " + run + " --steps 0");
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_THAT(zero.err, HasSubstr("--steps must be a positive number of batches, got 0"));
  CommandResult m = run_keel("memory " + run + " --json");
  ASSERT_EQ(m.exit_code, 0) << m.err;
  expect_fields(nlohmann::json::parse(m.out), {"device", "cores", "hbm_bytes_per_core", "batch_per_core", "fits",
                                               "max_batch_per_core", "per_core"});
  const std::string folder = shared_export("jpeg_test_folder", "--format jpeg --split test");
  CommandResult p = run_keel("predict " + run + " --json --input " + folder + "/test/9_ankle_boot/00000.jpg");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const nlohmann::json j = nlohmann::json::parse(p.out);
  expect_fields(j, {"checkpoint", "model", "dataset", "class_names", "top_k", "predictions", "count"});
  expect_fields(j["predictions"][0], {"input", "record", "label", "top_k"});
  expect_fields(j["predictions"][0]["top_k"][0], {"class", "name", "score"});
}

}  // namespace
}  // namespace keel::testing
