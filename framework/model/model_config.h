// A Keras model config read back (a checkpoint's `model_config` attribute): checked against keel's
// limits (core/limits.h) before anything looks at it further. keel rebuilds a checkpoint's model from
// its run configuration, never from this config; the config is then compared with the rebuilt
// model's own (Model::to_config), so that an edited or damaged one is refused either way.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace keel {

// Parses `text` (at most kMaxConfigBytes, core/limits.h) and checks it as check_model_config does.
// std::invalid_argument on anything else, naming the limit or the path of the bad value.
nlohmann::json parse_model_config(const std::string& text);

// A Sequential or Functional config of at most kMaxLayers layers of the classes keel has, whose
// sizes (units, filters, kernel sizes, strides, pool sizes, paddings, input shapes) are within the
// limits, whose rates and epsilons are finite and whose names are at most kMaxNameBytes. Throws
// std::invalid_argument naming the layer, the field and the limit.
void check_model_config(const nlohmann::json& config);

// "" if `stored` equals `built`, else the JSON pointer of their first difference
// ("/config/layers/2/config/units").
std::string first_config_difference(const nlohmann::json& stored, const nlohmann::json& built);

}  // namespace keel
