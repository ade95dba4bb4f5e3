#include "framework/checkpoint/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>

#include "framework/checkpoint/checkpoint_snapshot.h"
#include "framework/checkpoint/h5_file.h"

namespace keel {
namespace {

constexpr const char* kKerasVersion = "2.13.1";  // the legacy H5 layout keel writes

std::string weight_name(const std::string& variable) { return variable + ":0"; }  // "dense/kernel:0"
std::string weight_name(const Variable& v) { return weight_name(v.name()); }

nlohmann::json state_to_json(const TrainState& s) {
  return {{"step", s.step},
          {"epoch", s.epoch},
          {"batch_in_epoch", s.batch_in_epoch},
          {"iterator_state", s.iterator_state},
          {"epoch_totals", {{"loss_sum", s.epoch_totals.loss_sum}, {"correct", s.epoch_totals.correct},
                            {"samples", s.epoch_totals.samples}}},
          {"config", s.config},
          {"memory", s.memory},
          {"callbacks", s.callbacks}};
}

// A field of the train state that is not what keel writes.
struct FieldError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An integer field as stored: a float such as 1e30 (whose conversion would be undefined) is refused.
int64_t integer(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = j.at(key);
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    throw FieldError(std::string(key) + " does not fit in 64 bits");
  }
  if (!v.is_number_integer()) throw FieldError(std::string(key) + " is not an integer");
  return v.get<int64_t>();
}

// A train state's counters are never negative, and an epoch's totals count its samples.
void check_state_ranges(const std::string& path, const TrainState& s) {
  auto refuse = [&](const std::string& what) {
    throw CheckpointError("checkpoint " + path + ": /keel/train_state is damaged (" + what + ")");
  };
  if (s.step < 0) refuse("step " + std::to_string(s.step) + " is negative");
  if (s.epoch < 0) refuse("epoch " + std::to_string(s.epoch) + " is negative");
  if (s.batch_in_epoch < 0) refuse("batch_in_epoch " + std::to_string(s.batch_in_epoch) + " is negative");
  const StepTotals& t = s.epoch_totals;
  if (t.samples < 0 || t.correct < 0 || t.correct > t.samples) {
    refuse("epoch totals of " + std::to_string(t.correct) + " correct in " + std::to_string(t.samples) + " samples");
  }
  if (!std::isfinite(t.loss_sum)) refuse("the epoch's loss sum is not finite");
}

TrainState state_from_json(const std::string& path, const std::string& text) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    TrainState s;
    s.step = integer(j, "step");
    s.epoch = static_cast<int>(std::clamp<int64_t>(integer(j, "epoch"), -1, std::numeric_limits<int>::max()));
    s.batch_in_epoch = integer(j, "batch_in_epoch");
    s.iterator_state = j.at("iterator_state");
    const auto& t = j.at("epoch_totals");
    s.epoch_totals.loss_sum = t.at("loss_sum").get<double>();
    s.epoch_totals.correct = integer(t, "correct");
    s.epoch_totals.samples = integer(t, "samples");
    s.config = j.at("config");
    s.memory = j.value("memory", nlohmann::json());
    if (!s.memory.is_null() && !s.memory.is_object()) throw CheckpointError("checkpoint " + path + ": /keel/train_state's memory is not an object");
    s.callbacks = j.value("callbacks", nlohmann::json());
    if (!s.callbacks.is_null() && !s.callbacks.is_object()) throw CheckpointError("checkpoint " + path + ": /keel/train_state's callbacks is not an object");
    return s;
  } catch (const FieldError& e) {
    throw CheckpointError("checkpoint " + path + ": /keel/train_state is damaged (" + e.what() + ")");
  } catch (const nlohmann::json::exception& e) {
    std::string reason = e.what();
    if (reason.size() > 300) reason = reason.substr(0, 300) + "...";
    throw CheckpointError("checkpoint " + path + ": /keel/train_state is damaged (" + reason + ")");
  }
}

// The element count of a shape a file declares, refused above what one checkpoint dataset may hold.
int64_t checked_num_elements(const std::string& path, const Shape& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n) || n > H5File::kMaxVerifiedElements) {
      throw CheckpointError("checkpoint " + path + ": a dataset declares shape " + shape_string(shape) +
                            ", more than a checkpoint holds");
    }
  }
  return static_cast<int64_t>(n);
}

// The root attributes keel_config_crc32 covers.
uint32_t config_checksum(const std::string& model_config, const std::string& training_config) {
  const std::string both = model_config + '\0' + training_config;
  return H5File::crc32(both.data(), both.size());
}

// Opens a keel checkpoint of a format this keel reads; from format 2 on, every read is checked
// against its checksum. Returns the format version through `version`.
H5File open_keel_checkpoint(const std::string& path, int64_t* version_out = nullptr) {
  H5File f = H5File::open_read(path);
  if (!f.has_attr("/", "keel_format_version")) {
    throw CheckpointError("checkpoint " + path + " is not a keel checkpoint (no keel_format_version attribute)");
  }
  const int64_t version = f.get_attr_int64("/", "keel_format_version");
  if (version < kOldestCheckpointFormatVersion || version > kCheckpointFormatVersion) {
    throw CheckpointError("checkpoint " + path + " has keel_format_version " + std::to_string(version) +
                          "; this keel reads versions " + std::to_string(kOldestCheckpointFormatVersion) + " to " +
                          std::to_string(kCheckpointFormatVersion));
  }
  f.set_strict(version >= 2);
  if (!f.exists("keel/train_state")) {
    throw CheckpointError("checkpoint " + path + " has no /keel/train_state");
  }
  if (version >= 2) {
    const int64_t stored = f.get_attr_int64("/", "keel_config_crc32");
    if (stored != config_checksum(f.get_attr_string("/", "model_config"), f.get_attr_string("/", "training_config"))) {
      throw CheckpointError("checkpoint " + path + ": model_config or training_config fails its checksum "
                            "(keel_config_crc32): the file is damaged");
    }
  }
  if (version_out) *version_out = version;
  return f;
}

// A list of names for a message: at most ~300 bytes of it (a hostile file's list can be any size).
std::string joined(const std::vector<std::string>& names) {
  constexpr size_t kMaxBytes = 300;
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) {
    if (s.size() + names[i].size() > kMaxBytes) {
      s += (s.empty() ? "" : ", ") + names[i].substr(0, kMaxBytes > s.size() ? kMaxBytes - s.size() : 0) + "... (" +
           std::to_string(names.size()) + " names in all)";
      break;
    }
    s += (s.empty() ? "" : ", ") + names[i];
  }
  return s;
}

// Weights read from a checkpoint, by variable name, before anything is assigned.
using StagedWeights = std::map<std::string, std::vector<float>>;

// 1. Architecture: the same layers, in order, holding the same weights.
void stage_model_weights(H5File& f, const std::string& path, const Model& model, StagedWeights& staged) {
  std::vector<std::string> expected_layers;
  for (Layer* layer : model.layers()) expected_layers.push_back(layer->name());
  if (!f.exists("model_weights")) throw CheckpointError("checkpoint " + path + " has no /model_weights");
  const std::vector<std::string> saved_layers = f.get_attr_string_list("model_weights", "layer_names");
  if (saved_layers != expected_layers) {
    throw CheckpointError("checkpoint " + path + " belongs to another model: it holds layers [" + joined(saved_layers) +
                          "], the model being restored has [" + joined(expected_layers) + "]");
  }
  for (Layer* layer : model.layers()) {
    const std::string group = "model_weights/" + layer->name();
    std::vector<std::string> expected_names;
    for (Variable* v : layer->weights()) expected_names.push_back(weight_name(*v));
    const std::vector<std::string> saved_names = f.get_attr_string_list(group, "weight_names");
    if (saved_names != expected_names) {
      throw CheckpointError("checkpoint " + path + " belongs to another model: layer '" + layer->name() + "' holds [" +
                            joined(saved_names) + "], the model expects [" + joined(expected_names) + "]");
    }
    for (Variable* v : layer->weights()) {
      std::vector<float>& buffer = staged[v->name()];
      buffer.resize(static_cast<size_t>(num_elements(v->shape())));
      f.read_floats(group + "/" + weight_name(*v), v->shape(), buffer.data());
    }
  }
}

// 2. Optimizer: same kind, a slot for every variable. Builds the optimizer's slots; returns the saved
// iteration count.
int64_t stage_optimizer_weights(H5File& f, const std::string& path, const Model& model, Optimizer& optimizer,
                                StagedWeights& staged) {
  if (!f.exists("optimizer_weights")) throw CheckpointError("checkpoint " + path + " has no /optimizer_weights");
  const std::vector<std::string> saved_opt = f.get_attr_string_list("optimizer_weights", "weight_names");
  const std::string iterations = optimizer.name() + "/iterations:0";
  if (saved_opt.empty() || saved_opt.front() != iterations) {
    throw CheckpointError("checkpoint " + path + " was saved with another optimizer (" +
                          (saved_opt.empty() ? std::string("none") : saved_opt.front()) + "), not " + optimizer.name());
  }
  optimizer.build(model.trainable_variables());
  std::vector<std::string> expected_opt = {iterations};
  for (Variable* slot : optimizer.slot_variables()) expected_opt.push_back(weight_name(*slot));
  // Saved before the first step, as Keras saves an optimizer not yet built: iterations 0 and no
  // slots, which are then the zeros a fresh build gives.
  if (saved_opt.size() == 1 && expected_opt.size() > 1 && f.read_int64("optimizer_weights/" + iterations) == 0) {
    for (Variable* slot : optimizer.slot_variables()) staged[slot->name()].assign(static_cast<size_t>(num_elements(slot->shape())), 0.0f);
    return 0;
  }
  if (saved_opt != expected_opt) {
    throw CheckpointError("checkpoint " + path + ": optimizer weights [" + joined(saved_opt) +
                          "] do not match this model's [" + joined(expected_opt) + "]");
  }
  const int64_t saved_iterations = f.read_int64("optimizer_weights/" + iterations);
  for (Variable* slot : optimizer.slot_variables()) {
    std::vector<float>& buffer = staged[slot->name()];
    buffer.resize(static_cast<size_t>(num_elements(slot->shape())));
    f.read_floats("optimizer_weights/" + weight_name(*slot), slot->shape(), buffer.data());
  }
  return saved_iterations;
}

}  // namespace

void save_checkpoint(const std::string& path, const Model& model, const Optimizer& optimizer, const TrainState& state) {
  write_checkpoint(path, snapshot_checkpoint(model, optimizer, state));
}

void write_checkpoint(const std::string& path, const CheckpointSnapshot& snapshot) {
  H5File f = H5File::create(path);
  f.set_attr_int64("/", "keel_format_version", kCheckpointFormatVersion);
  f.set_attr_string("/", "keras_version", kKerasVersion);
  f.set_attr_string("/", "backend", "keel");
  f.set_attr_string("/", "model_config", snapshot.model_config);
  f.set_attr_string("/", "training_config", snapshot.training_config);
  f.set_attr_int64("/", "keel_config_crc32", config_checksum(snapshot.model_config, snapshot.training_config));

  f.create_group("model_weights");
  std::vector<std::string> layer_names;
  for (const SnapshotLayer& layer : snapshot.layers) layer_names.push_back(layer.name);
  f.set_attr_string_list("model_weights", "layer_names", layer_names);
  f.set_attr_string("model_weights", "backend", "keel");
  f.set_attr_string("model_weights", "keras_version", kKerasVersion);
  for (const SnapshotLayer& layer : snapshot.layers) {
    const std::string group = "model_weights/" + layer.name;
    f.create_group(group);
    std::vector<std::string> names;
    for (const SnapshotValue& v : layer.weights) {
      names.push_back(weight_name(v.name));
      f.write_floats(group + "/" + weight_name(v.name), v.shape, v.values.data());
    }
    f.set_attr_string_list(group, "weight_names", names);
  }

  f.create_group("optimizer_weights");
  const std::string iterations = snapshot.optimizer_name + "/iterations:0";
  std::vector<std::string> opt_names = {iterations};
  f.write_int64("optimizer_weights/" + iterations, snapshot.iterations);
  for (const SnapshotValue& slot : snapshot.slots) {
    opt_names.push_back(weight_name(slot.name));
    f.write_floats("optimizer_weights/" + weight_name(slot.name), slot.shape, slot.values.data());
  }
  f.set_attr_string_list("optimizer_weights", "weight_names", opt_names);

  f.create_group("keel");
  f.write_string("keel/train_state", state_to_json(snapshot.state).dump());
  f.close();
}

TrainState load_model_weights(const std::string& path, Model& model) {
  H5File f = open_keel_checkpoint(path);
  TrainState state = state_from_json(path, f.read_string("keel/train_state"));
  StagedWeights staged;
  stage_model_weights(f, path, model, staged);
  for (Variable* v : model.variables()) {
    const std::vector<float>& buffer = staged.at(v->name());
    Tensor& t = v->mutable_value();
    if (!t.is_abstract()) std::copy(buffer.begin(), buffer.end(), t.data());
  }
  return state;
}

void read_optimizer_state(const std::string& path, CheckpointSnapshot& into) {
  H5File f = open_keel_checkpoint(path);
  if (!f.exists("optimizer_weights")) throw CheckpointError("checkpoint " + path + " has no /optimizer_weights");
  const std::vector<std::string> names = f.get_attr_string_list("optimizer_weights", "weight_names");
  if (names.empty() || names.front().size() < 13 || !names.front().ends_with("/iterations:0")) {
    throw CheckpointError("checkpoint " + path + ": optimizer_weights does not start with <optimizer>/iterations:0");
  }
  into.optimizer_name = names.front().substr(0, names.front().size() - 13);
  into.iterations = f.read_int64("optimizer_weights/" + names.front());
  into.slots.resize(names.size() - 1);
  for (size_t i = 1; i < names.size(); ++i) {
    if (!names[i].ends_with(":0")) throw CheckpointError("checkpoint " + path + ": optimizer weight '" + names[i].substr(0, 200) + "' is not a variable");
    SnapshotValue& slot = into.slots[i - 1];
    slot.name = names[i].substr(0, names[i].size() - 2);
    slot.shape = f.dataset_shape("optimizer_weights/" + names[i]);
    slot.values.resize(static_cast<size_t>(checked_num_elements(path, slot.shape)));
    f.read_floats("optimizer_weights/" + names[i], slot.shape, slot.values.data());
  }
}

TrainState read_train_state(const std::string& path) {
  H5File f = open_keel_checkpoint(path);
  return state_from_json(path, f.read_string("keel/train_state"));
}

CheckpointCheck verify_checkpoint(const std::string& path) {
  CheckpointCheck check;
  H5File f = open_keel_checkpoint(path, &check.format_version);
  check.checksummed = check.format_version >= 2;
  check.datasets = f.verify_checksums();
  check.state = state_from_json(path, f.read_string("keel/train_state"));
  return check;
}

TrainState load_checkpoint(const std::string& path, Model& model, Optimizer& optimizer) {
  H5File f = open_keel_checkpoint(path);
  TrainState state = state_from_json(path, f.read_string("keel/train_state"));
  check_state_ranges(path, state);

  StagedWeights staged;  // read everything before assigning anything
  stage_model_weights(f, path, model, staged);
  const int64_t saved_iterations = stage_optimizer_weights(f, path, model, optimizer, staged);
  if (saved_iterations != state.step) {
    throw CheckpointError("checkpoint " + path + " is inconsistent: optimizer iterations " +
                          std::to_string(saved_iterations) + " but train_state step " + std::to_string(state.step));
  }

  // 3. Every check passed: assign.
  auto assign = [&](Variable* v) {
    const std::vector<float>& buffer = staged.at(v->name());
    Tensor& t = v->mutable_value();
    if (!t.is_abstract()) std::copy(buffer.begin(), buffer.end(), t.data());
  };
  for (Variable* v : model.variables()) assign(v);
  for (Variable* slot : optimizer.slot_variables()) assign(slot);
  optimizer.set_iterations(saved_iterations);
  return state;
}

}  // namespace keel
