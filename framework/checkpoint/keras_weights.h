// Weights written by Keras: `model.save_weights("w.h5")`, `model.save("m.h5")` (its /model_weights),
// keras.applications weight files (`..._tf_dim_ordering_tf_kernels[_notop].h5`), and keel's own
// checkpoints — loaded as Keras 2's legacy `load_weights` does:
//
//   topological (default): the file's layers that hold weights, in the order of its `layer_names`,
//     are matched one to one with the model's layers that hold weights, in model order; every
//     layer's weights in Keras order (trainable, then non-trainable).
//   by_name: each file layer goes to the model layer of the same name; model layers the file does
//     not have keep their values (fine-tuning: a new head); file layers the model does not have are
//     ignored. With skip_mismatch, a layer whose weight count or shape differs is skipped (and
//     reported) instead of refused. skip_mismatch needs by_name, as in Keras.
//
// Attribute lists split by Keras above 64 KiB (`layer_names0`, `layer_names1`, ...) are read whole.
// Every shape is checked and every value read before the first is written: a refused file leaves the
// model as it was. Only the model's weights are touched (no optimizer state: training starts fresh).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/checkpoint/checkpoint_error.h"
#include "framework/model/model.h"

namespace keel {

struct KerasWeightsOptions {
  bool by_name = false;
  bool skip_mismatch = false;
};

struct KerasWeightsReport {
  int64_t layers_loaded = 0;
  int64_t values_loaded = 0;          // floats written into the model
  std::vector<std::string> skipped;   // with skip_mismatch: one line per skipped layer
  std::vector<std::string> not_in_file;  // by_name: model layers with weights the file lacks
  bool checksummed = false;           // a keel checkpoint of format >= 2 (every value verified)
};

// Loads the weights of the file at `path` into `model` (see above). CheckpointError on a file that
// is not HDF5, holds no layer_names, or does not fit the model: the message names the layer, the
// weight and both shapes.
KerasWeightsReport load_keras_weights(const std::string& path, Model& model, const KerasWeightsOptions& options = {});

}  // namespace keel
