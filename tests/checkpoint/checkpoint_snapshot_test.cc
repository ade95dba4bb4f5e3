// Checkpoint snapshots: a host copy taken at a step boundary, which training may then move past, and
// written by the one writer save_checkpoint uses, so both give the same file contents.
#include "framework/checkpoint/checkpoint_snapshot.h"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/checkpoint/h5_file.h"
#include "framework/layers/core_layers.h"
#include "framework/layers/initializers.h"
#include "framework/train/losses.h"
#include "framework/train/optimizers.h"
#include "tests/support/checkpoint_state.h"
#include "tests/support/cli_runner.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

// 3 -> Dense(4, relu) -> Dense(2, softmax) with Adam: 26 parameters, 52 slot values.
std::unique_ptr<Sequential> mlp(uint64_t seed) {
  clear_session();
  set_random_seed(seed);
  auto m = std::make_unique<Sequential>(std::vector<LayerPtr>{Dense(4, "relu", Shape{3}), Dense(2, "softmax")});
  m->compile(std::make_shared<Adam>(), std::make_shared<CategoricalCrossentropy>());
  return m;
}

void train_steps(Model& m, int steps) {
  const Batch b{testing::random_host({6, 3}, -1, 1, 77), testing::host({6, 2}, {1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1})};
  for (int i = 0; i < steps; ++i) m.train_step(b);
}

TrainState state_at(int64_t step) {
  TrainState s;
  s.step = step;
  s.epoch = 2;
  s.batch_in_epoch = 1;
  s.iterator_state = {{"produced", 1}};
  s.epoch_totals = StepTotals{0.5, 3, 6};
  s.config = {{"model", "mlp"}};
  return s;
}

std::vector<std::vector<float>> values_of(Model& m) {
  std::vector<std::vector<float>> out;
  for (Variable* v : m.variables()) out.push_back(v->value().to_vector());
  for (Variable* v : m.optimizer().slot_variables()) out.push_back(v->value().to_vector());
  return out;
}

class CheckpointSnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_temp_dir("keel-snapshot-test"); }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    set_random_seed(0);
  }
  std::string dir_;
};

TEST_F(CheckpointSnapshotTest, BytesCountEveryWeightAndSlot) {
  auto m = mlp(1);
  train_steps(*m, 1);
  const CheckpointSnapshot s = snapshot_checkpoint(*m, m->optimizer(), state_at(1));
  EXPECT_EQ(s.bytes(), 3 * 26 * 4);  // weights, m and v
  ASSERT_EQ(s.layers.size(), 2u);
  EXPECT_EQ(s.layers[0].name, "dense");
  EXPECT_EQ(s.layers[0].weights[0].name, "dense/kernel");
  EXPECT_EQ(s.layers[0].weights[0].shape, (Shape{3, 4}));
  EXPECT_EQ(s.slots.front().name, "Adam/dense/kernel/m");
  EXPECT_EQ(s.iterations, 1);
}

TEST_F(CheckpointSnapshotTest, IsACopyThatTrainingMayMovePast) {
  auto m = mlp(1);
  train_steps(*m, 3);
  const std::vector<std::vector<float>> at_3 = values_of(*m);
  const CheckpointSnapshot s = snapshot_checkpoint(*m, m->optimizer(), state_at(3));
  train_steps(*m, 2);  // as the training thread does while the writer thread writes
  ASSERT_NE(values_of(*m), at_3);
  const std::string p = dir_ + "/ckpt-3.h5";
  write_checkpoint(p, s);
  auto restored = mlp(2);
  const TrainState st = load_checkpoint(p, *restored, restored->optimizer());
  EXPECT_EQ(values_of(*restored), at_3);
  EXPECT_EQ(restored->optimizer().iterations(), 3);
  EXPECT_EQ(st.iterator_state, state_at(3).iterator_state);
}

TEST_F(CheckpointSnapshotTest, ARefillReusesTheMemoryOfTheLastOne) {
  auto m = mlp(1);
  train_steps(*m, 1);
  CheckpointSnapshot s;
  snapshot_checkpoint(*m, m->optimizer(), state_at(1), s);
  std::vector<const float*> where;
  for (const SnapshotLayer& l : s.layers) {
    for (const SnapshotValue& w : l.weights) where.push_back(w.values.data());
  }
  for (const SnapshotValue& v : s.slots) where.push_back(v.values.data());
  train_steps(*m, 1);
  snapshot_checkpoint(*m, m->optimizer(), state_at(2), s);
  size_t i = 0;
  for (const SnapshotLayer& l : s.layers) {
    for (const SnapshotValue& w : l.weights) EXPECT_EQ(w.values.data(), where[i++]) << w.name;
  }
  for (const SnapshotValue& v : s.slots) EXPECT_EQ(v.values.data(), where[i++]) << v.name;
  EXPECT_EQ(s.iterations, 2);
  EXPECT_EQ(s.state.step, 2);
  EXPECT_EQ(s.layers[1].weights[1].values, m->layers()[1]->weights()[1]->value().to_vector());
}

TEST_F(CheckpointSnapshotTest, WritesWhatSaveCheckpointWrites) {
  auto m = mlp(1);
  train_steps(*m, 2);
  const std::string a = dir_ + "/saved.h5", b = dir_ + "/written.h5";
  save_checkpoint(a, *m, m->optimizer(), state_at(2));
  write_checkpoint(b, snapshot_checkpoint(*m, m->optimizer(), state_at(2)));
  testing::expect_bit_identical(a, b, 13);
  H5File fa = H5File::open_read(a), fb = H5File::open_read(b);
  for (const char* attr : {"model_config", "training_config", "keras_version", "backend"}) {
    EXPECT_EQ(fa.get_attr_string("/", attr), fb.get_attr_string("/", attr)) << attr;
  }
  EXPECT_EQ(fa.get_attr_int64("/", "keel_format_version"), fb.get_attr_int64("/", "keel_format_version"));
  EXPECT_EQ(fa.get_attr_string_list("model_weights", "layer_names"), fb.get_attr_string_list("model_weights", "layer_names"));
  EXPECT_EQ(fa.get_attr_string_list("optimizer_weights", "weight_names"),
            fb.get_attr_string_list("optimizer_weights", "weight_names"));
  EXPECT_EQ(fa.read_string("keel/train_state"), fb.read_string("keel/train_state"));
}

}  // namespace
}  // namespace keel
