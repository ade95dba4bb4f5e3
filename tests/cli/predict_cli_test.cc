// `keel predict` end to end: a run classifies an exported Fashion-MNIST JPEG folder (and TFRecords
// of the same images) exactly as `keel evaluate` scores it; class names from the run's dataset; top-k;
// bad input named, exit 2.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/cli_runner.h"

namespace keel::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Keras's names (keras.datasets.fashion_mnist), written out here rather than taken from keel.
const std::vector<std::string> kKerasNames = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                              "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

class PredictCli : public ::testing::Test {
 protected:
  // One MLP run for the tests of this process: 100 steps on the IDX files, over 8 replicas.
  static void SetUpTestSuite() {
    run_root_ = make_temp_dir("keel-predict");
    CommandResult t = run_keel("train --model mlp --device v3-8 --batch-per-core 16 --seed 1 --epochs 1 "
                               "--stop-after-steps 100 --quiet --checkpoint-dir " + run_root_ + "/run");
    ASSERT_EQ(t.exit_code, 0) << t.err;
  }
  static void TearDownTestSuite() { fs::remove_all(run_root_); }
  void SetUp() override { dir_ = make_temp_dir("keel-predict-case"); }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string run() { return run_root_ + "/run"; }
  static std::string jpeg_test_folder() { return shared_export("jpeg_test_folder", "--format jpeg --split test"); }
  static double evaluate_accuracy(const std::string& dataset) {
    CommandResult e = run_keel("evaluate " + run() + " --split test --json --dataset " + dataset);
    EXPECT_EQ(e.exit_code, 0) << e.err;
    return nlohmann::json::parse(e.out).at("accuracy").get<double>();
  }
  static nlohmann::json predict_json(const std::string& args) {
    CommandResult p = run_keel("predict " + run() + " --json " + args);
    EXPECT_EQ(p.exit_code, 0) << p.err;
    return nlohmann::json::parse(p.out);
  }

  static std::string run_root_;
  std::string dir_;
};

std::string PredictCli::run_root_;

// The first image (by name) of an exported class folder.
std::string first_image(const std::string& class_folder) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(class_folder)) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files.at(0);
}

// The label of an exported image is its class folder's leading id ("3_dress" -> 3).
int64_t label_of(const std::string& path) { return std::stoll(fs::path(path).parent_path().filename().string()); }

TEST_F(PredictCli, ClassifiesAJpegFolderWithEvaluatesAccuracy) {
  const std::string folder = jpeg_test_folder();
  const double evaluated = evaluate_accuracy("images:" + folder);
  const nlohmann::json j = predict_json("--input " + folder + "/test --top-k 1");
  EXPECT_EQ(j.at("class_names").get<std::vector<std::string>>(), kKerasNames);
  EXPECT_EQ(j.at("checkpoint").get<std::string>(), run() + "/ckpt-100.h5");
  EXPECT_EQ(j.at("model"), "mlp");
  const nlohmann::json& predictions = j.at("predictions");
  ASSERT_EQ(predictions.size(), 10000u);
  EXPECT_EQ(j.at("count"), 10000);
  int64_t correct = 0;
  for (const nlohmann::json& p : predictions) {
    ASSERT_EQ(p.at("top_k").size(), 1u);
    const nlohmann::json& top = p.at("top_k")[0];
    const int64_t c = top.at("class").get<int64_t>();
    EXPECT_EQ(top.at("name"), kKerasNames.at(static_cast<size_t>(c)));
    correct += c == label_of(p.at("input").get<std::string>());
  }
  EXPECT_EQ(static_cast<double>(correct) / 10000.0, evaluated);
  EXPECT_GT(evaluated, 0.6);  // a trained model, not a constant
}

TEST_F(PredictCli, ClassifiesTFRecordsWithEvaluatesAccuracy) {
  const std::string records = shared_export("tfrecord_jpeg_test", "--format tfrecord --shards 2 --split test");
  const double evaluated = evaluate_accuracy("tfrecord:" + records);
  const nlohmann::json j = predict_json("--input " + records + "/test-00000-of-00002.tfrecord " + records +
                                        "/test-00001-of-00002.tfrecord --top-k 2");
  const nlohmann::json& predictions = j.at("predictions");
  ASSERT_EQ(predictions.size(), 10000u);
  EXPECT_EQ(predictions[5000].at("record"), 0);  // the second file's first record
  int64_t correct = 0;
  for (const nlohmann::json& p : predictions) {
    const nlohmann::json& top = p.at("top_k");
    ASSERT_EQ(top.size(), 2u);
    EXPECT_GE(top[0].at("score").get<double>(), top[1].at("score").get<double>());
    correct += top[0].at("class") == p.at("label");
  }
  EXPECT_EQ(static_cast<double>(correct) / 10000.0, evaluated);
}

TEST_F(PredictCli, OneImageGetsItsTopKAsText) {
  const std::string image = jpeg_test_folder() + "/test/1_trouser/00002.jpg";
  ASSERT_TRUE(fs::exists(image));
  CommandResult p = run_keel("predict " + run() + " --input " + image + " --top-k 3");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr(image + ": Trouser "));  // an easy class for the model
  const nlohmann::json j = predict_json("--input " + image + " --top-k 99");  // at most the classes
  const nlohmann::json& top = j.at("predictions")[0].at("top_k");
  ASSERT_EQ(top.size(), 10u);
  double sum = 0;
  for (const nlohmann::json& t : top) sum += t.at("score").get<double>();
  EXPECT_NEAR(sum, 1.0, 1e-5);  // softmax scores, every class once
  EXPECT_EQ(j.at("predictions")[0].at("record"), nullptr);
}

TEST_F(PredictCli, ClassNamesOfAnImageFolderRunAreItsFolderNames) {
  const std::string folder = jpeg_test_folder();
  CommandResult t = run_keel("train --model mlp --device cpu --batch-per-core 256 --seed 1 --epochs 1 --stop-after-steps 2 "
                             "--quiet --dataset images:" + folder + "/test --checkpoint-dir " + dir_ + "/img");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  CommandResult p = run_keel("predict " + dir_ + "/img --json --input " + folder + "/test/9_ankle_boot/00000.jpg");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  std::vector<std::string> folders;
  for (const auto& e : fs::directory_iterator(folder + "/test")) folders.push_back(e.path().filename().string());
  std::sort(folders.begin(), folders.end());
  EXPECT_EQ(nlohmann::json::parse(p.out).at("class_names").get<std::vector<std::string>>(), folders);
  // --dataset takes them from elsewhere; a bad one is an error, not a fallback.
  const std::string image = " --input " + folder + "/test/9_ankle_boot/00000.jpg";
  CommandResult keras = run_keel("predict " + dir_ + "/img --json --dataset fashion_mnist" + image);
  ASSERT_EQ(keras.exit_code, 0) << keras.err;
  EXPECT_EQ(nlohmann::json::parse(keras.out).at("class_names").get<std::vector<std::string>>(), kKerasNames);
  EXPECT_EQ(run_keel("predict " + dir_ + "/img --dataset images:" + dir_ + "/none" + image).exit_code, 2);
}

TEST_F(PredictCli, ABadImageIsNamedWithExit2) {
  const std::string good = first_image(jpeg_test_folder() + "/test/0_tshirt_top");
  fs::create_directories(dir_ + "/in");
  fs::copy_file(good, dir_ + "/in/a.jpg");
  std::ofstream(dir_ + "/in/b.jpg") << "not a JPEG at all";
  CommandResult p = run_keel("predict " + run() + " --input " + dir_ + "/in");
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_THAT(p.err, HasSubstr(dir_ + "/in/b.jpg"));
  EXPECT_EQ(std::count(p.err.begin(), p.err.end(), '\n'), 1) << p.err;

  // A damaged record: the file and the record are named.
  const std::string records = shared_export("tfrecord_jpeg_test", "--format tfrecord --shards 2 --split test");
  const std::string damaged = dir_ + "/damaged.tfrecord";
  fs::copy_file(records + "/test-00000-of-00002.tfrecord", damaged);
  {
    std::fstream f(damaged, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(5000);
    const char byte = static_cast<char>(f.get() ^ 0xff);
    f.seekp(5000);
    f.put(byte);
  }
  CommandResult r = run_keel("predict " + run() + " --json --input " + damaged);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr(damaged + " record "));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST_F(PredictCli, BadUsageIsExit2) {
  const std::string image = first_image(jpeg_test_folder() + "/test/0_tshirt_top");
  for (const std::string& args : {run() + " --input " + dir_ + "/missing.jpg", run() + " --input " + image + " --top-k 0",
                                  run(), dir_ + "/no-run --input " + image, run() + " --input " + dir_}) {
    CommandResult p = run_keel("predict " + args);
    EXPECT_EQ(p.exit_code, 2) << args << "\n" << p.err;
    EXPECT_EQ(std::count(p.err.begin(), p.err.end(), '\n'), 1) << args << "\n" << p.err;
  }
  CommandResult help = run_keel("--help");
  EXPECT_THAT(help.out, HasSubstr("  predict "));
  CommandResult verb_help = run_keel("predict --help");
  EXPECT_EQ(verb_help.exit_code, 0);
  EXPECT_THAT(verb_help.out, HasSubstr("--top-k"));
}

}  // namespace
}  // namespace keel::testing
