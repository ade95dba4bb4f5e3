// Keras weight files in (framework/checkpoint/keras_weights.h): tests/golden/keras_mlp_weights.h5 was
// written by h5py in Keras's save_weights layout from a PyTorch-trained MLP
// (bench/golden_keras_weights.py mlp). Loading follows Keras 2's legacy load_weights; a file that does
// not fit is refused with one message naming the layer, the weight and both shapes, and leaves the
// model as it was.
#include "framework/checkpoint/keras_weights.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "framework/checkpoint/h5_file.h"
#include "framework/layers/core_layers.h"
#include "framework/layers/initializers.h"
#include "framework/layers/layer.h"
#include "framework/train/losses.h"
#include "framework/train/optimizers.h"
#include "tests/support/cli_runner.h"

namespace keel {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

const std::string kGolden = std::string(KEEL_TESTS_DIR) + "/golden/keras_mlp_weights.h5";

// keel's MLP: 784 -> Dense(128, relu) "dense" -> Dense(classes, softmax) "dense_1".
std::unique_ptr<Sequential> keras_mlp(int64_t classes = 10, uint64_t seed = 3) {
  clear_session();
  set_random_seed(seed);
  auto m = std::make_unique<Sequential>(std::vector<LayerPtr>{Dense(128, "relu", Shape{784}), Dense(classes, "softmax")});
  m->compile(std::make_shared<Adam>(), std::make_shared<CategoricalCrossentropy>());
  return m;
}

std::vector<float> golden(const std::string& dataset, const Shape& shape) {
  H5File f = H5File::open_read(kGolden);
  std::vector<float> v(static_cast<size_t>(num_elements(shape)));
  f.read_floats(dataset, shape, v.data());
  return v;
}

std::vector<std::vector<float>> values(Model& m) {
  std::vector<std::vector<float>> out;
  for (Variable* v : m.variables()) out.push_back(v->value().to_vector());
  return out;
}

class KerasWeightsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_temp_dir("keel-keras-weights"); }
  void TearDown() override { fs::remove_all(dir_); }

  // A copy of the golden file, edited through the HDF5 API.
  std::string edited(const std::string& name, const std::function<void(hid_t)>& edit) {
    const std::string p = dir_ + "/" + name;
    fs::copy_file(kGolden, p);
    hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    edit(f);
    H5Fclose(f);
    return p;
  }
  // Expects the load to throw CheckpointError saying each of `what`, leaving the model untouched.
  void expect_refused(const std::string& p, const std::vector<std::string>& what, KerasWeightsOptions options = {},
                      int64_t classes = 10) {
    auto m = keras_mlp(classes);
    const auto before = values(*m);
    try {
      load_keras_weights(p, *m, options);
      ADD_FAILURE() << "loaded " << p;
    } catch (const CheckpointError& e) {
      for (const std::string& w : what) EXPECT_THAT(e.what(), HasSubstr(w));
      EXPECT_LT(std::string(e.what()).size(), 1024u);
    }
    EXPECT_EQ(values(*m), before);
  }
  std::string dir_;
};

TEST_F(KerasWeightsTest, TopologicalLoadSkipsWeightlessLayersAndCopiesEveryValue) {
  auto m = keras_mlp();
  const KerasWeightsReport r = load_keras_weights(kGolden, *m);
  EXPECT_EQ(r.layers_loaded, 2);
  EXPECT_EQ(r.values_loaded, 784 * 128 + 128 + 128 * 10 + 10);
  EXPECT_FALSE(r.checksummed);
  const std::vector<Variable*> vars = m->variables();
  EXPECT_EQ(vars[0]->value().to_vector(), golden("dense/dense/kernel:0", {784, 128}));
  EXPECT_EQ(vars[1]->value().to_vector(), golden("dense/dense/bias:0", {128}));
  EXPECT_EQ(vars[2]->value().to_vector(), golden("dense_1/dense_1/kernel:0", {128, 10}));
  EXPECT_EQ(vars[3]->value().to_vector(), golden("dense_1/dense_1/bias:0", {10}));
}

TEST_F(KerasWeightsTest, AWholeModelFileWithModelWeightsGroupLoadsToo) {
  // model.save's layout: the layers under /model_weights.
  const std::string p = edited("model.h5", [](hid_t f) {
    hid_t g = H5Gcreate2(f, "/model_weights", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    for (const char* layer : {"dense", "dropout", "dense_1"}) {
      H5Ocopy(f, layer, g, layer, H5P_DEFAULT, H5P_DEFAULT);
      H5Ldelete(f, layer, H5P_DEFAULT);
    }
    // layer_names moves with them, byte for byte.
    hid_t a = H5Aopen(f, "layer_names", H5P_DEFAULT);
    hid_t type = H5Aget_type(a), space = H5Aget_space(a);
    std::vector<char> bytes(H5Aget_storage_size(a));
    H5Aread(a, type, bytes.data());
    hid_t b = H5Acreate2(g, "layer_names", type, space, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(b, type, bytes.data());
    for (hid_t id : {b, a}) H5Aclose(id);
    H5Tclose(type);
    H5Sclose(space);
    H5Gclose(g);
    H5Adelete(f, "layer_names");
  });
  auto m = keras_mlp();
  EXPECT_EQ(load_keras_weights(p, *m).layers_loaded, 2);
  EXPECT_EQ(m->variables()[2]->value().to_vector(), golden("dense_1/dense_1/kernel:0", {128, 10}));
}

TEST_F(KerasWeightsTest, LayerNamesSplitIntoChunksAreReadWhole) {
  // Keras splits an attribute over 64 KiB into layer_names0, layer_names1, ...
  const std::string p = edited("chunked.h5", [](hid_t) {});
  {
    H5File f = H5File::open_read(kGolden);
    const std::vector<std::string> names = f.get_attr_string_list("/", "layer_names");
    f.close();
    hid_t file = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    H5Adelete(file, "layer_names");
    H5Fclose(file);
    // H5File cannot open read-write; write the chunks through a fresh H5File-compatible API call.
    hid_t rw = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    for (size_t i = 0; i < names.size(); ++i) {
      hid_t type = H5Tcopy(H5T_C_S1);
      H5Tset_size(type, names[i].size());
      hsize_t one = 1;
      hid_t space = H5Screate_simple(1, &one, nullptr);
      const std::string attr = "layer_names" + std::to_string(i);
      hid_t a = H5Acreate2(rw, attr.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
      H5Awrite(a, type, names[i].data());
      H5Aclose(a);
      H5Sclose(space);
      H5Tclose(type);
    }
    H5Fclose(rw);
  }
  auto m = keras_mlp();
  EXPECT_EQ(load_keras_weights(p, *m).layers_loaded, 2);
}

TEST_F(KerasWeightsTest, ByNameLoadsMatchingLayersAndSkipMismatchSkipsTheHead) {
  // A 5-class model: the file's head (128, 10) does not fit.
  expect_refused(kGolden, {"dense_1", "(128, 10)", "(128, 5)"}, {true, false}, 5);
  auto m = keras_mlp(5);
  const std::vector<float> head_before = m->variables()[2]->value().to_vector();
  const KerasWeightsReport r = load_keras_weights(kGolden, *m, {true, true});
  EXPECT_EQ(r.layers_loaded, 2);
  ASSERT_EQ(r.skipped.size(), 2u);  // kernel and bias
  EXPECT_THAT(r.skipped[0], HasSubstr("(128, 10)"));
  EXPECT_EQ(m->variables()[0]->value().to_vector(), golden("dense/dense/kernel:0", {784, 128}));
  EXPECT_EQ(m->variables()[2]->value().to_vector(), head_before);
  // skip_mismatch without by_name is refused, as in Keras.
  expect_refused(kGolden, {"by_name"}, {false, true});
}

TEST_F(KerasWeightsTest, ByNameLeavesLayersTheFileLacks) {
  const std::string p = edited("no-head.h5", [](hid_t f) {
    H5Ldelete(f, "/dense_1", H5P_DEFAULT);
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, 7);
    hsize_t two = 2;
    hid_t space = H5Screate_simple(1, &two, nullptr);
    H5Adelete(f, "layer_names");
    hid_t a = H5Acreate2(f, "layer_names", type, space, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, type, "dense\0\0dropout");
    H5Aclose(a);
    H5Sclose(space);
    H5Tclose(type);
  });
  auto m = keras_mlp();
  const std::vector<float> head_before = m->variables()[2]->value().to_vector();
  const KerasWeightsReport r = load_keras_weights(p, *m, {true, false});
  EXPECT_EQ(r.layers_loaded, 1);
  EXPECT_EQ(r.not_in_file, std::vector<std::string>{"dense_1"});
  EXPECT_EQ(m->variables()[2]->value().to_vector(), head_before);
  // Topologically, one layer for two is refused.
  expect_refused(p, {"holds weights for 1 layers", "the model has 2", "--by-name"});
}

TEST_F(KerasWeightsTest, HostileFilesAreRefusedWithOneClearMessage) {
  // A layer listed but missing.
  expect_refused(edited("missing.h5", [](hid_t f) { H5Ldelete(f, "/dense_1", H5P_DEFAULT); }),
                 {"lists 'dense_1'", "does not hold"});
  // A wrong shape.
  expect_refused(edited("shape.h5", [](hid_t f) {
                   H5Ldelete(f, "/dense/dense/kernel:0", H5P_DEFAULT);
                   hsize_t dims[2] = {784, 64};
                   hid_t space = H5Screate_simple(2, dims, nullptr);
                   hid_t d = H5Dcreate2(f, "/dense/dense/kernel:0", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
                   H5Dclose(d);
                   H5Sclose(space);
                 }),
                 {"layer #0 'dense'", "dense/kernel:0", "(784, 64)", "(784, 128)"});
  // An extra layer with weights.
  expect_refused(edited("extra.h5", [](hid_t f) {
                   H5Ocopy(f, "/dense_1", f, "/dense_2", H5P_DEFAULT, H5P_DEFAULT);
                   hid_t type = H5Tcopy(H5T_C_S1);
                   H5Tset_size(type, 7);
                   hsize_t four = 4;
                   hid_t space = H5Screate_simple(1, &four, nullptr);
                   H5Adelete(f, "layer_names");
                   hid_t a = H5Acreate2(f, "layer_names", type, space, H5P_DEFAULT, H5P_DEFAULT);
                   H5Awrite(a, type, "dense\0\0dropoutdense_1dense_2");
                   H5Aclose(a);
                   H5Sclose(space);
                   H5Tclose(type);
                 }),
                 {"holds weights for 3 layers", "the model has 2"});
  // An empty name (it would name the file's root group).
  expect_refused(edited("empty-name.h5", [](hid_t f) {
                   hid_t type = H5Tcopy(H5T_C_S1);
                   H5Tset_size(type, 7);
                   hsize_t three = 3;
                   hid_t space = H5Screate_simple(1, &three, nullptr);
                   H5Adelete(f, "layer_names");
                   hid_t a = H5Acreate2(f, "layer_names", type, space, H5P_DEFAULT, H5P_DEFAULT);
                   H5Awrite(a, type, "dense\0\0\0\0\0\0\0\0\0dense_1");
                   H5Aclose(a);
                   H5Sclose(space);
                   H5Tclose(type);
                 }),
                 {"lists ''", "not a layer name"});
  // No layer_names at all.
  expect_refused(edited("none.h5", [](hid_t f) { H5Adelete(f, "layer_names"); }), {"no layer_names"});
  // Truncated.
  const std::string truncated = dir_ + "/truncated.h5";
  fs::copy_file(kGolden, truncated);
  fs::resize_file(truncated, fs::file_size(truncated) / 2);
  expect_refused(truncated, {"truncated.h5"});
}

TEST_F(KerasWeightsTest, FrozenLayersGetNoGradientsNorSlots) {
  auto m = keras_mlp();
  m->layers()[0]->set_trainable(false);
  EXPECT_EQ(m->trainable_variables().size(), 2u);  // dense_1's kernel and bias
  EXPECT_EQ(m->layers()[0]->weights().size(), 2u);  // still saved and loaded, in Keras order
  EXPECT_EQ(m->layers()[0]->get_config()["trainable"], false);
  m->layers()[0]->set_trainable(true);
  EXPECT_EQ(m->trainable_variables().size(), 4u);
}

}  // namespace
}  // namespace keel
