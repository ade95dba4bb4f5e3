#include "framework/checkpoint/keras_weights.h"

#include <algorithm>
#include <map>
#include <utility>

#include "framework/checkpoint/h5_file.h"
#include "framework/layers/layer.h"

namespace keel {
namespace {

// More names than any model has; a damaged file can declare any number of chunks.
constexpr size_t kMaxNames = size_t{1} << 20;

struct FileLayer {
  std::string name;
  std::vector<std::string> weight_names;
};

// A Keras name-list attribute, whole: `name`, or Keras's chunks `name0`, `name1`, ... (written when
// the list is over 64 KiB). Empty when neither exists.
std::vector<std::string> read_name_list(H5File& f, const std::string& group, const std::string& name) {
  if (f.has_attr(group, name)) return f.get_attr_string_list(group, name);
  std::vector<std::string> all;
  for (size_t chunk = 0; f.has_attr(group, name + std::to_string(chunk)); ++chunk) {
    std::vector<std::string> part = f.get_attr_string_list(group, name + std::to_string(chunk));
    if (part.size() > kMaxNames - all.size()) {
      throw CheckpointError("weight file " + f.path() + ": " + name + " lists more than " + std::to_string(kMaxNames) + " names");
    }
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

// The group holding the layers: /model_weights in a whole-model file (model.save, keel's
// checkpoints), the root in a save_weights file.
std::string weights_root(H5File& f) {
  if (f.exists("model_weights") && (f.has_attr("model_weights", "layer_names") || f.has_attr("model_weights", "layer_names0"))) {
    return "model_weights";
  }
  if (f.has_attr("/", "layer_names") || f.has_attr("/", "layer_names0")) return "/";
  throw CheckpointError("weight file " + f.path() + " holds no layer_names attribute (at its root or in /model_weights): "
                        "it is not a Keras weight file (model.save_weights or model.save)");
}

std::string child(const std::string& root, const std::string& name) { return root == "/" ? name : root + "/" + name; }

// The file's layers that hold weights, in the order of its layer_names.
std::vector<FileLayer> file_layers(H5File& f, const std::string& root) {
  std::vector<FileLayer> layers;
  for (const std::string& name : read_name_list(f, root, "layer_names")) {
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
      throw CheckpointError("weight file " + f.path() + ": layer_names lists '" + name.substr(0, 200) +
                            "', which is not a layer name");
    }
    if (!f.exists(child(root, name))) {
      throw CheckpointError("weight file " + f.path() + ": layer_names lists '" + name.substr(0, 200) + "', which the file does not hold");
    }
    FileLayer layer{name, read_name_list(f, child(root, name), "weight_names")};
    if (!layer.weight_names.empty()) layers.push_back(std::move(layer));
  }
  return layers;
}

std::vector<Layer*> layers_with_weights(const Model& model) {
  std::vector<Layer*> out;
  for (Layer* layer : model.layers()) {
    if (!layer->weights().empty()) out.push_back(layer);
  }
  return out;
}

std::string names_of(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) {
    if (s.size() > 200) return s + ", ... (" + std::to_string(names.size()) + ")";
    s += (s.empty() ? "" : ", ") + n;
  }
  return s;
}

using Staged = std::vector<std::pair<Variable*, std::vector<float>>>;

// Reads weight `i` of a file layer into `staged` when its shape is the variable's; otherwise returns
// the reason it does not fit.
std::string stage_weight(H5File& f, const std::string& root, const FileLayer& file_layer, size_t i, Variable* v,
                         Staged& staged) {
  const std::string path = child(root, file_layer.name) + "/" + file_layer.weight_names[i];
  const Shape shape = f.dataset_shape(path);
  if (shape != v->shape()) {
    return "weight " + file_layer.weight_names[i] + " has shape " + shape_string(shape) + " in the file; the model's " +
           v->name() + " has " + shape_string(v->shape());
  }
  std::vector<float> values(static_cast<size_t>(num_elements(shape)));
  f.read_floats(path, shape, values.data());
  staged.emplace_back(v, std::move(values));
  return "";
}

void stage_topological(H5File& f, const std::string& root, const Model& model, Staged& staged, KerasWeightsReport& report) {
  const std::vector<FileLayer> in_file = file_layers(f, root);
  const std::vector<Layer*> in_model = layers_with_weights(model);
  if (in_file.size() != in_model.size()) {
    std::vector<std::string> names;
    for (const FileLayer& l : in_file) names.push_back(l.name);
    throw CheckpointError("weight file " + f.path() + " holds weights for " + std::to_string(in_file.size()) + " layers (" +
                          names_of(names) + "); the model has " + std::to_string(in_model.size()) +
                          " layers with weights. Load by name (--by-name) to match layers by their names");
  }
  for (size_t k = 0; k < in_file.size(); ++k) {
    const std::vector<Variable*> weights = in_model[k]->weights();
    const std::string which = "layer #" + std::to_string(k) + " '" + in_model[k]->name() + "' (file layer '" + in_file[k].name + "')";
    if (weights.size() != in_file[k].weight_names.size()) {
      throw CheckpointError("weight file " + f.path() + ": " + which + " expects " + std::to_string(weights.size()) +
                            " weights, the file holds " + std::to_string(in_file[k].weight_names.size()) + " [" +
                            names_of(in_file[k].weight_names) + "]");
    }
    for (size_t i = 0; i < weights.size(); ++i) {
      const std::string mismatch = stage_weight(f, root, in_file[k], i, weights[i], staged);
      if (!mismatch.empty()) throw CheckpointError("weight file " + f.path() + ": " + which + ": " + mismatch);
    }
    ++report.layers_loaded;
  }
}

void stage_by_name(H5File& f, const std::string& root, const Model& model, bool skip_mismatch, Staged& staged,
                   KerasWeightsReport& report) {
  std::map<std::string, Layer*> by_name;
  for (Layer* layer : layers_with_weights(model)) by_name[layer->name()] = layer;
  std::map<std::string, bool> loaded;
  for (const FileLayer& file_layer : file_layers(f, root)) {
    auto it = by_name.find(file_layer.name);
    if (it == by_name.end()) continue;  // a layer the model does not have
    const std::vector<Variable*> weights = it->second->weights();
    const std::string which = "layer '" + file_layer.name + "'";
    if (weights.size() != file_layer.weight_names.size()) {
      const std::string reason = which + " expects " + std::to_string(weights.size()) + " weights, the file holds " +
                                 std::to_string(file_layer.weight_names.size());
      if (!skip_mismatch) throw CheckpointError("weight file " + f.path() + ": " + reason);
      report.skipped.push_back(reason);
      continue;
    }
    for (size_t i = 0; i < weights.size(); ++i) {
      const std::string mismatch = stage_weight(f, root, file_layer, i, weights[i], staged);
      if (mismatch.empty()) continue;
      if (!skip_mismatch) throw CheckpointError("weight file " + f.path() + ": " + which + ": " + mismatch);
      report.skipped.push_back(which + ": " + mismatch);
    }
    loaded[file_layer.name] = true;
    ++report.layers_loaded;
  }
  for (const auto& [name, layer] : by_name) {
    if (!loaded.count(name)) report.not_in_file.push_back(name);
  }
}

}  // namespace

KerasWeightsReport load_keras_weights(const std::string& path, Model& model, const KerasWeightsOptions& options) {
  if (options.skip_mismatch && !options.by_name) {
    throw CheckpointError("skipping mismatched layers needs loading by name (as Keras's load_weights: skip_mismatch "
                          "only with by_name)");
  }
  H5File f = H5File::open_read(path);
  KerasWeightsReport report;
  if (f.has_attr("/", "keel_format_version") && f.get_attr_int64("/", "keel_format_version") >= 2) {
    f.set_strict(true);  // a keel checkpoint: every value verified against its checksum
    report.checksummed = true;
  }
  const std::string root = weights_root(f);
  Staged staged;  // everything read and checked before anything is written
  if (options.by_name) {
    stage_by_name(f, root, model, options.skip_mismatch, staged, report);
  } else {
    stage_topological(f, root, model, staged, report);
  }
  for (auto& [v, values] : staged) {
    Tensor& t = v->mutable_value();
    if (!t.is_abstract()) std::copy(values.begin(), values.end(), t.data());
    report.values_loaded += static_cast<int64_t>(values.size());
  }
  return report;
}

}  // namespace keel
