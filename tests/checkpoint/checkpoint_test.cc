// Checkpoints: save then load restores weights, optimizer slots, iterations and the train state
// exactly, in Keras's legacy H5 layout; a checkpoint of another model, shape or optimizer, or a file
// that is not keel's, is refused with CheckpointError and leaves the model untouched.
#include "framework/checkpoint/checkpoint.h"

#include <cstdlib>
#include <chrono>
#include <cstring>
#include <thread>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>

#include "framework/checkpoint/h5_file.h"
#include "framework/layers/core_layers.h"
#include "framework/layers/initializers.h"
#include "framework/layers/layer.h"
#include "framework/train/losses.h"
#include "framework/train/optimizers.h"
#include "tests/support/cli_runner.h"
#include "tests/support/file_damage.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using ::testing::HasSubstr;

// 3 -> Dense(hidden, relu) -> Dense(2, softmax), named "dense", "dense_1", with Adam.
std::unique_ptr<Sequential> mlp(int64_t hidden, uint64_t seed, std::shared_ptr<Optimizer> optimizer = nullptr) {
  clear_session();
  set_random_seed(seed);
  auto m = std::make_unique<Sequential>(std::vector<LayerPtr>{Dense(hidden, "relu", Shape{3}), Dense(2, "softmax")});
  m->compile(optimizer ? optimizer : std::make_shared<Adam>(), std::make_shared<CategoricalCrossentropy>());
  return m;
}

Batch batch() {
  return Batch{testing::random_host({6, 3}, -1, 1, 77),
               testing::host({6, 2}, {1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1})};
}

void train(Model& m, int steps) {
  for (int i = 0; i < steps; ++i) m.train_step(batch());
}

// Every value a load may write: weights, slots (by name), iterations.
struct Snapshot {
  std::vector<std::pair<std::string, std::vector<float>>> values;
  int64_t iterations = 0;
  bool operator==(const Snapshot&) const = default;
};

Snapshot snapshot(Model& m) {
  Snapshot s;
  for (Variable* v : m.variables()) s.values.emplace_back(v->name(), v->value().to_vector());
  for (Variable* v : m.optimizer().slot_variables()) s.values.emplace_back(v->name(), v->value().to_vector());
  s.iterations = m.optimizer().iterations();
  return s;
}

// Bitwise, so that -0.0 and 0.0 or NaN payloads would count as different.
bool bit_equal(const Snapshot& a, const Snapshot& b) {
  if (a.iterations != b.iterations || a.values.size() != b.values.size()) return false;
  for (size_t i = 0; i < a.values.size(); ++i) {
    if (a.values[i].first != b.values[i].first || a.values[i].second.size() != b.values[i].second.size()) return false;
    if (std::memcmp(a.values[i].second.data(), b.values[i].second.data(), a.values[i].second.size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

TrainState a_state(int64_t step) {
  TrainState s;
  s.step = step;
  s.epoch = 1;
  s.batch_in_epoch = 2;
  s.iterator_state = {{"format", "keel.dataset_iterator"}, {"produced", 2}};
  s.epoch_totals = StepTotals{1.25, 5, 8};
  s.config = {{"model", "mlp"}, {"seed", 1}, {"device", "cpu"}};
  return s;
}

void expect_same_state(const TrainState& got, const TrainState& want) {
  EXPECT_EQ(got.step, want.step);
  EXPECT_EQ(got.epoch, want.epoch);
  EXPECT_EQ(got.batch_in_epoch, want.batch_in_epoch);
  EXPECT_EQ(got.iterator_state, want.iterator_state);
  EXPECT_EQ(got.epoch_totals.loss_sum, want.epoch_totals.loss_sum);
  EXPECT_EQ(got.epoch_totals.correct, want.epoch_totals.correct);
  EXPECT_EQ(got.epoch_totals.samples, want.epoch_totals.samples);
  EXPECT_EQ(got.config, want.config);
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_temp_dir("keel-checkpoint-test"); }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    set_random_seed(0);
  }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  // A checkpoint of mlp(4, seed 1) after 3 Adam steps; `source` keeps the model.
  std::string saved(std::unique_ptr<Sequential>* source = nullptr, int64_t state_step = 3) {
    auto m = mlp(4, 1);
    train(*m, 3);
    const std::string p = path("ckpt-3.h5");
    save_checkpoint(p, *m, m->optimizer(), a_state(state_step));
    if (source) *source = std::move(m);
    return p;
  }

  // Expects load_checkpoint(p) into `target` to throw CheckpointError naming the file and saying
  // `what`, and to leave every weight, slot and the iteration count as they were.
  void expect_refused(const std::string& p, Model& target, const std::string& what) {
    const Snapshot before = snapshot(target);
    try {
      load_checkpoint(p, target, target.optimizer());
      ADD_FAILURE() << "loaded " << p;
    } catch (const CheckpointError& e) {
      EXPECT_THAT(e.what(), HasSubstr(p));
      EXPECT_THAT(e.what(), HasSubstr(what));
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
    }
    EXPECT_TRUE(bit_equal(snapshot(target), before)) << "a refused checkpoint changed the model";
  }

  std::string dir_;
};

TEST_F(CheckpointTest, SaveThenLoadRestoresWeightsSlotsAndStateExactly) {
  std::unique_ptr<Sequential> source;
  const std::string p = saved(&source);
  auto target = mlp(4, 2);
  ASSERT_FALSE(bit_equal(snapshot(*target), snapshot(*source))) << "the two models must start apart";
  EXPECT_FALSE(target->optimizer().built());

  const TrainState state = load_checkpoint(p, *target, target->optimizer());
  expect_same_state(state, a_state(3));
  const Snapshot restored = snapshot(*target);
  EXPECT_EQ(restored.iterations, 3);
  EXPECT_EQ(restored.values.size(), 4u + 8u) << "four weights and Adam's m and v for each";
  EXPECT_TRUE(bit_equal(restored, snapshot(*source)));

  // Restored exactly: the next step is the same on both, bit for bit.
  train(*source, 1);
  train(*target, 1);
  EXPECT_TRUE(bit_equal(snapshot(*target), snapshot(*source)));
  EXPECT_EQ(target->optimizer().iterations(), 4);
}

TEST_F(CheckpointTest, ReadTrainStateNeedsNoModel) {
  const std::string p = saved();
  expect_same_state(read_train_state(p), a_state(3));
}

TEST_F(CheckpointTest, FileHasKerasLegacyLayoutAndKeelsAttributes) {
  std::unique_ptr<Sequential> source;
  const std::string p = saved(&source);
  H5File f = H5File::open_read(p);
  EXPECT_EQ(f.get_attr_int64("/", "keel_format_version"), kCheckpointFormatVersion);
  EXPECT_EQ(kCheckpointFormatVersion, 2);
  EXPECT_EQ(f.get_attr_string("/", "keras_version"), "2.13.1");
  EXPECT_EQ(f.get_attr_string("/", "backend"), "keel");
  EXPECT_EQ(nlohmann::json::parse(f.get_attr_string("/", "model_config")), source->to_config());
  const nlohmann::json training = nlohmann::json::parse(f.get_attr_string("/", "training_config"));
  EXPECT_EQ(training.at("optimizer_config").at("class_name"), "Adam");
  EXPECT_EQ(training.at("metrics"), nlohmann::json::parse(R"(["accuracy"])"));

  EXPECT_EQ(f.get_attr_string_list("model_weights", "layer_names"), (std::vector<std::string>{"dense", "dense_1"}));
  EXPECT_EQ(f.get_attr_string_list("model_weights/dense", "weight_names"),
            (std::vector<std::string>{"dense/kernel:0", "dense/bias:0"}));
  EXPECT_EQ(f.get_attr_string_list("model_weights/dense_1", "weight_names"),
            (std::vector<std::string>{"dense_1/kernel:0", "dense_1/bias:0"}));
  EXPECT_EQ(f.dataset_shape("model_weights/dense/dense/kernel:0"), (Shape{3, 4}));
  EXPECT_EQ(f.dataset_shape("model_weights/dense_1/dense_1/bias:0"), (Shape{2}));
  std::vector<float> kernel(12);
  f.read_floats("model_weights/dense/dense/kernel:0", {3, 4}, kernel.data());
  EXPECT_EQ(kernel, source->variables()[0]->value().to_vector());

  EXPECT_EQ(f.get_attr_string_list("optimizer_weights", "weight_names"),
            (std::vector<std::string>{"Adam/iterations:0", "Adam/dense/kernel/m:0", "Adam/dense/bias/m:0",
                                      "Adam/dense_1/kernel/m:0", "Adam/dense_1/bias/m:0", "Adam/dense/kernel/v:0",
                                      "Adam/dense/bias/v:0", "Adam/dense_1/kernel/v:0", "Adam/dense_1/bias/v:0"}));
  EXPECT_EQ(f.read_int64("optimizer_weights/Adam/iterations:0"), 3);
  EXPECT_EQ(f.dataset_shape("optimizer_weights/Adam/dense/kernel/v:0"), (Shape{3, 4}));
  EXPECT_TRUE(f.exists("keel/train_state"));
}

TEST_F(CheckpointTest, AWrongShapeIsRefusedAndLeavesTheModelUntouched) {
  const std::string p = saved();
  // The same layer and weight names, a hidden layer of 5 instead of 4; trained so its slots hold values.
  auto wider = mlp(5, 3);
  train(*wider, 2);
  expect_refused(p, *wider, "dense/kernel:0");
}

TEST_F(CheckpointTest, AnotherArchitectureIsRefusedAndLeavesTheModelUntouched) {
  const std::string p = saved();
  {
    clear_session();
    Sequential deeper({Dense(4, "relu", Shape{3}), Dense(4, "relu"), Dense(2, "softmax")});
    deeper.compile(std::make_shared<Adam>(), std::make_shared<CategoricalCrossentropy>());
    train(deeper, 1);
    expect_refused(p, deeper, "belongs to another model");
  }
  {
    clear_session();
    layers::Dense::Options o;
    o.activation = "relu";
    o.input_shape = Shape{3};
    o.name = "hidden";
    Sequential renamed({Dense(4, o), Dense(2, "softmax")});
    renamed.compile(std::make_shared<Adam>(), std::make_shared<CategoricalCrossentropy>());
    expect_refused(p, renamed, "belongs to another model");
  }
  {
    clear_session();
    layers::Dense::Options o;
    o.activation = "relu";
    o.input_shape = Shape{3};
    o.use_bias = false;
    Sequential no_bias({Dense(4, o), Dense(2, "softmax")});
    no_bias.compile(std::make_shared<Adam>(), std::make_shared<CategoricalCrossentropy>());
    train(no_bias, 1);
    expect_refused(p, no_bias, "belongs to another model");
  }
}

TEST_F(CheckpointTest, AnotherOptimizerIsRefusedAndLeavesTheModelUntouched) {
  const std::string p = saved();
  SGD::Options o;
  o.momentum = 0.9f;
  auto m = mlp(4, 4, std::make_shared<SGD>(o));
  train(*m, 2);
  expect_refused(p, *m, "another optimizer");
}

TEST_F(CheckpointTest, IterationsDisagreeingWithTheTrainStateAreRefused) {
  const std::string p = saved(nullptr, /*state_step=*/7);
  auto m = mlp(4, 5);
  train(*m, 1);
  expect_refused(p, *m, "inconsistent");
}

TEST_F(CheckpointTest, FilesThatAreNotKeelCheckpointsAreRefused) {
  auto m = mlp(4, 6);
  train(*m, 1);
  {
    H5File f = H5File::create(path("plain.h5"));
    f.create_group("model_weights");
    f.close();
  }
  expect_refused(path("plain.h5"), *m, "not a keel checkpoint");
  EXPECT_THROW(read_train_state(path("plain.h5")), CheckpointError);
  {
    H5File f = H5File::create(path("future.h5"));
    f.set_attr_int64("/", "keel_format_version", 3);
    f.create_group("keel");
    f.write_string("keel/train_state", "{}");
    f.close();
  }
  expect_refused(path("future.h5"), *m, "keel_format_version 3");
  {
    H5File f = H5File::create(path("damaged.h5"));
    f.set_attr_int64("/", "keel_format_version", 1);
    f.create_group("keel");
    f.write_string("keel/train_state", "{\"step\": ");
    f.close();
  }
  expect_refused(path("damaged.h5"), *m, "damaged");
  EXPECT_THROW(read_train_state(path("damaged.h5")), CheckpointError);
  std::ofstream(path("text.h5")) << "not hdf5 at all\n";
  expect_refused(path("text.h5"), *m, "text.h5");
  expect_refused(path("missing.h5"), *m, "missing.h5");
}

TEST_F(CheckpointTest, ACheckpointSavedBeforeTheFirstStepLoads) {
  // Saved straight after compile: the optimizer has no slots yet.
  auto source = mlp(4, 8);
  const std::string p = path("ckpt-0.h5");
  save_checkpoint(p, *source, source->optimizer(), a_state(0));
  auto target = mlp(4, 9);
  ASSERT_NO_THROW(load_checkpoint(p, *target, target->optimizer()));
  for (size_t i = 0; i < source->variables().size(); ++i) {
    EXPECT_EQ(target->variables()[i]->value().to_vector(), source->variables()[i]->value().to_vector());
  }
  EXPECT_EQ(target->optimizer().iterations(), 0);
  for (Variable* slot : target->optimizer().slot_variables()) {
    for (float v : slot->value().to_vector()) ASSERT_EQ(v, 0.0f) << slot->name();
  }
}

TEST_F(CheckpointTest, AFlippedByteInAnyDatasetIsDetectedAndTheModelKeptAsItWas) {
  const std::string clean = saved();
  const std::vector<std::string> datasets = testing::dataset_paths(clean);
  ASSERT_GE(datasets.size(), 10u);  // 4 weights, 8 Adam slots, iterations, train_state
  auto target = mlp(4, 7);
  train(*target, 1);
  for (const std::string& d : datasets) {
    const std::string p = path("damaged.h5");
    std::filesystem::copy_file(clean, p, std::filesystem::copy_options::overwrite_existing);
    if (d == "/keel/train_state") {
      testing::flip_byte(p, testing::find_bytes(p, "batch_in_epoch") + 3, 0x20);  // its bytes live in the global heap
    } else {
      testing::flip_byte(p, testing::dataset_offset(p, d) + 1, 0x04);
    }
    EXPECT_THROW(verify_checkpoint(p), CheckpointError) << d;
    expect_refused(p, *target, "fails its checksum");
  }
  // The config attributes are checked too (by HDF5's checksum of the object header that holds them).
  const std::string p = path("config.h5");
  std::filesystem::copy_file(clean, p);
  testing::flip_byte(p, testing::find_bytes(p, "\"class_name\"") + 2, 0x01);
  expect_refused(p, *target, "checksum");
  // And the undamaged file verifies.
  const CheckpointCheck check = verify_checkpoint(clean);
  EXPECT_TRUE(check.checksummed);
  EXPECT_EQ(check.format_version, kCheckpointFormatVersion);
  EXPECT_EQ(check.datasets, static_cast<int64_t>(datasets.size()));
  expect_same_state(check.state, a_state(3));
}

// Rewrites a checkpoint as format 1 wrote it: no checksums.
void make_format_1(const std::string& p) {
  hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  for (const std::string& d : testing::dataset_paths(p)) {
    hid_t ds = H5Dopen2(f, d.c_str(), H5P_DEFAULT);
    H5Adelete(ds, "keel_crc32");
    H5Dclose(ds);
  }
  H5Adelete(f, "keel_config_crc32");
  H5Fclose(f);
  H5File file = H5File::open_read(p);
  file.close();
  hid_t rw = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  hid_t a = H5Aopen(rw, "keel_format_version", H5P_DEFAULT);
  const int64_t one = 1;
  H5Awrite(a, H5T_NATIVE_INT64, &one);
  H5Aclose(a);
  H5Fclose(rw);
}

TEST_F(CheckpointTest, AFormat1CheckpointStillLoadsUnverified) {
  std::unique_ptr<Sequential> source;
  const std::string p = saved(&source);
  make_format_1(p);
  const CheckpointCheck check = verify_checkpoint(p);
  EXPECT_EQ(check.format_version, 1);
  EXPECT_FALSE(check.checksummed);
  auto target = mlp(4, 9);
  load_checkpoint(p, *target, target->optimizer());
  EXPECT_TRUE(bit_equal(snapshot(*target), snapshot(*source)));
  // A format-2 file that lost a checksum is damaged, not old.
  const std::string q = saved();
  hid_t f = H5Fopen(q.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  hid_t ds = H5Dopen2(f, "/model_weights/dense/dense/bias:0", H5P_DEFAULT);
  H5Adelete(ds, "keel_crc32");
  H5Dclose(ds);
  H5Fclose(f);
  expect_refused(q, *target, "has no checksum");
}

TEST_F(CheckpointTest, TheCallbacksStateRoundTripsAndIsOptionalWhenRead) {
  auto m = mlp(4, 1);
  TrainState s = a_state(0);
  s.callbacks = {{"EarlyStopping", {{"wait", 1}, {"best", 0.25}, {"best_epoch", 3}, {"stopped_epoch", 0}}},
                 {"ReduceLROnPlateau", {{"wait", 0}, {"cooldown_counter", 2}, {"best", nullptr}, {"learning_rate", 5e-4}}}};
  save_checkpoint(path("callbacks.h5"), *m, m->optimizer(), s);
  EXPECT_EQ(read_train_state(path("callbacks.h5")).callbacks, s.callbacks);
  // A train state written before keel kept the callbacks' state has no such field.
  const std::string old_state = R"({"step": 3, "epoch": 1, "batch_in_epoch": 0, "iterator_state": null,
      "epoch_totals": {"loss_sum": 0, "correct": 0, "samples": 0}, "config": {"model": "mlp"}})";
  for (const auto& [name, text] : std::vector<std::pair<std::string, std::string>>{
           {"old.h5", old_state}, {"bad.h5", old_state.substr(0, old_state.size() - 1) + R"(, "callbacks": 5})"}}) {
    H5File f = H5File::create(path(name));
    f.set_attr_int64("/", "keel_format_version", 1);
    f.create_group("keel");
    f.write_string("keel/train_state", text);
    f.close();
  }
  EXPECT_TRUE(read_train_state(path("old.h5")).callbacks.is_null());
  EXPECT_THROW(read_train_state(path("bad.h5")), CheckpointError);
}

TEST_F(CheckpointTest, ATrainStateWithNegativeCountersIsRefused) {
  auto target = mlp(4, 9);
  for (const auto& [field, value] : std::vector<std::pair<std::string, int64_t>>{{"step", -1}, {"epoch", -2}, {"batch_in_epoch", -3}}) {
    TrainState s = a_state(3);
    if (field == "step") s.step = value;
    if (field == "epoch") s.epoch = static_cast<int>(value);
    if (field == "batch_in_epoch") s.batch_in_epoch = value;
    auto m = mlp(4, 1);
    const std::string p = path("negative-" + field + ".h5");
    save_checkpoint(p, *m, m->optimizer(), s);
    expect_refused(p, *target, field);  // (the CLI's limits refuse them earlier: tools/cli/stored_run.h)
  }
}

// Flips one random bit at a time anywhere in a checkpoint: each flip is either detected or harmless
// (it landed in bytes nothing reads, and the load gives exactly the saved values); never a silent
// change. (HDF5's own checksums guard the metadata of format-1.8 files, keel's the data.)
TEST_F(CheckpointTest, RandomBitFlipsAnywhereAreDetectedOrHarmless) {
  std::unique_ptr<Sequential> source;
  const std::string clean = saved(&source);
  const Snapshot want = snapshot(*source);
  const auto size = static_cast<int64_t>(std::filesystem::file_size(clean));
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  int detected = 0, harmless = 0;
  // KEEL_FLIP_COUNT=20000 for a long run by hand; CI runs 400.
  const int flips = std::getenv("KEEL_FLIP_COUNT") ? std::atoi(std::getenv("KEEL_FLIP_COUNT")) : 400;
  for (int i = 0; i < flips; ++i) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    const int64_t offset = static_cast<int64_t>((rng >> 20) % static_cast<uint64_t>(size));
    const std::string p = path("flipped.h5");
    std::filesystem::copy_file(clean, p, std::filesystem::copy_options::overwrite_existing);
    testing::flip_byte(p, offset, static_cast<unsigned char>(1u << ((rng >> 8) % 8)));
    auto target = mlp(4, 11);
    try {
      verify_checkpoint(p);
      const TrainState state = load_checkpoint(p, *target, target->optimizer());
      ASSERT_TRUE(bit_equal(snapshot(*target), want)) << "a flip at byte " << offset << " changed a loaded value";
      expect_same_state(state, a_state(3));
      ++harmless;
    } catch (const CheckpointError&) {
      ++detected;
    }
  }
  EXPECT_GT(detected, flips / 4);
  std::printf("%d random bit flips in a %lld-byte checkpoint: %d detected, %d in bytes nothing reads\n", flips,
              static_cast<long long>(size), detected, harmless);
}

// No timestamps in the file: the same state saved a second later gives the same bytes (a resumed
// run's checkpoints can be compared with `cmp`).
TEST_F(CheckpointTest, TheSameStateGivesTheSameBytes) {
  std::unique_ptr<Sequential> source;
  const std::string a = saved(&source);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  const std::string b = path("again.h5");
  save_checkpoint(b, *source, source->optimizer(), a_state(3));
  EXPECT_EQ(testing::read_file(a), testing::read_file(b));
}

}  // namespace
}  // namespace keel
