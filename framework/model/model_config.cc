#include "framework/model/model_config.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

#include "framework/core/limits.h"

namespace keel {
namespace {

using nlohmann::json;

const std::set<std::string>& known_classes() {
  static const std::set<std::string> names = {
      "InputLayer", "Dense",   "Activation", "Flatten", "Dropout", "Conv2D", "ZeroPadding2D", "MaxPooling2D",
      "AveragePooling2D", "GlobalAveragePooling2D", "Add", "Concatenate", "BatchNormalization"};
  return names;
}

// Integer fields and their limits; a field may be one integer or nested arrays of them.
struct IntField {
  const char* key;
  int64_t lo, hi;
};
constexpr IntField kIntFields[] = {
    {"units", 1, kMaxUnits},          {"filters", 1, kMaxUnits},         {"kernel_size", 1, kMaxKernelSize},
    {"strides", 1, kMaxKernelSize},   {"dilation_rate", 1, kMaxKernelSize}, {"pool_size", 1, kMaxKernelSize},
    {"padding", 0, kMaxKernelSize},   {"groups", 1, 1},                  {"axis", -kMaxInputRank - 1, kMaxInputRank}};

// A value for a message, without dumping it (dump recurses; the value is untrusted): a string quoted
// and cut short, else its type.
std::string describe(const json& j) {
  if (j.is_string()) return "'" + quote_untrusted(j.get_ref<const std::string&>(), 64) + "'";
  return std::string("a JSON ") + j.type_name();
}

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw std::invalid_argument("model_config: " + where + ": " + what);
}

void check_name(const std::string& where, const json& j) {
  if (!j.is_string()) fail(where, "a name must be a string");
  const std::string& s = j.get_ref<const std::string&>();
  if (s.empty() || s.size() > kMaxNameBytes) {
    fail(where, "a name must have 1 to " + std::to_string(kMaxNameBytes) + " bytes, got " + std::to_string(s.size()));
  }
}

// Every integer in `j` (nested arrays of depth <= 2) within [lo, hi]; strings pass (Conv2D's "same").
void check_ints(const std::string& where, const json& j, const IntField& f, int depth = 0) {
  if (j.is_string() && std::string(f.key) == "padding") return;
  if (j.is_array() && depth < 2 && j.size() <= 4) {
    for (const json& e : j) check_ints(where, e, f, depth + 1);
    return;
  }
  if (!j.is_number_integer()) fail(where, std::string(f.key) + " must be an integer or a short list of them");
  if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    fail(where, std::string(f.key) + " is past 2^63");
  }
  check_in_range("model_config " + where + ": " + f.key, j.get<int64_t>(), f.lo, f.hi);
}

void check_batch_input_shape(const std::string& where, const json& j) {
  if (!j.is_array() || j.empty() || !j[0].is_null() || j.size() > static_cast<size_t>(kMaxInputRank) + 1) {
    fail(where, "batch_input_shape must be [null, d1, ..., dk] with 1 <= k <= " + std::to_string(kMaxInputRank));
  }
  std::vector<int64_t> shape;
  for (size_t i = 1; i < j.size(); ++i) {
    if (!j[i].is_number_integer() || (j[i].is_number_unsigned() && j[i].get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))) {
      fail(where, "batch_input_shape must hold integers");
    }
    shape.push_back(j[i].get<int64_t>());
  }
  check_input_shape("model_config " + where + ": batch_input_shape", shape);
}

void check_layer_config(const std::string& where, const json& config) {
  if (!config.is_object()) fail(where, "\"config\" must be an object");
  for (const auto& [key, value] : config.items()) {
    if (key == "name") {
      check_name(where, value);
    } else if (key == "batch_input_shape") {
      check_batch_input_shape(where, value);
    } else if (value.is_number_float() && !std::isfinite(value.get<double>())) {
      fail(where, key + " must be finite");
    } else if (value.is_string() && value.get_ref<const std::string&>().size() > kMaxNameBytes) {
      fail(where, key + " is longer than " + std::to_string(kMaxNameBytes) + " bytes");
    }
    for (const IntField& f : kIntFields) {
      if (key == f.key) check_ints(where, value, f);
    }
  }
  if (config.contains("rate")) {
    const json& rate = config["rate"];
    if (!rate.is_number() || !(rate.get<double>() >= 0.0 && rate.get<double>() < 1.0)) fail(where, "rate must be in [0, 1)");
  }
}

void check_layer(size_t index, const json& layer) {
  std::string where = "layer " + std::to_string(index);
  if (!layer.is_object()) fail(where, "not an object");
  const json& class_name = layer.contains("class_name") ? layer["class_name"] : json();
  if (!class_name.is_string() || !known_classes().count(class_name.get<std::string>())) {
    fail(where, "unknown layer class " + describe(class_name));
  }
  const json& config = layer.contains("config") ? layer["config"] : json();
  if (config.is_object() && config.contains("name") && config["name"].is_string()) {
    where += " '" + quote_untrusted(config["name"].get_ref<const std::string&>(), 64) + "'";
  }
  where += " (" + class_name.get<std::string>() + ")";
  check_layer_config(where, config);
}

// The deepest nesting of arrays and objects in JSON text (brackets inside strings do not count).
int json_depth(const std::string& text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

void check_model_config(const json& config) {
  if (!config.is_object() || !config.contains("class_name") || !config.contains("config")) {
    fail("top level", "expected {\"class_name\": \"Sequential\" or \"Functional\", \"config\": {...}}");
  }
  const json& class_name = config["class_name"];
  if (class_name != "Sequential" && class_name != "Functional") {
    fail("top level", "class_name must be Sequential or Functional, got " + describe(class_name));
  }
  const json& body = config["config"];
  if (!body.is_object() || !body.contains("layers") || !body["layers"].is_array()) {
    fail("top level", "\"config\" must hold a \"layers\" list");
  }
  if (body.contains("name")) check_name("top level", body["name"]);
  const json& layers = body["layers"];
  if (layers.empty() || layers.size() > static_cast<size_t>(kMaxLayers)) {
    fail("top level", "a model must have 1 to " + std::to_string(kMaxLayers) + " layers, got " +
                          std::to_string(layers.size()) + " (keel's limit; see README \"Limits\")");
  }
  for (size_t i = 0; i < layers.size(); ++i) check_layer(i, layers[i]);
}

json parse_model_config(const std::string& text) {
  if (text.size() > kMaxConfigBytes) {
    throw std::invalid_argument("model_config: " + std::to_string(text.size()) + " bytes, more than keel's limit of " +
                                limit_string(static_cast<int64_t>(kMaxConfigBytes)));
  }
  // Comparing and printing JSON recurse: a config nested deeper than any model's is refused unparsed.
  if (json_depth(text) > kMaxJsonDepth) {
    throw std::invalid_argument("model_config: nested deeper than keel's limit of " + std::to_string(kMaxJsonDepth));
  }
  json config = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) throw std::invalid_argument("model_config is not valid JSON");
  check_model_config(config);
  return config;
}

std::string first_config_difference(const json& stored, const json& built) {
  if (stored == built) return "";
  const json patch = json::diff(stored, built);
  if (patch.empty() || !patch[0].contains("path")) return "/";
  const std::string path = patch[0]["path"].get<std::string>();
  return path.empty() ? "/" : quote_untrusted(path, 120);
}

}  // namespace keel
