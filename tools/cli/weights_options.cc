// The head of a zoo model and what is frozen: --include-top, --pooling, --freeze (run_config.h).
#include <cstdio>
#include <filesystem>
#include <regex>

#include "framework/checkpoint/keras_weights.h"
#include "framework/core/untrusted_regex.h"
#include "framework/layers/layer.h"
#include "tools/cli/run_config.h"

namespace keel::cli {

void add_head_options(po::options_description& d) {
  d.add_options()
      ("include-top", po::value<std::string>(), "ResNets: true (default) or false, without the avg_pool + predictions "
                                                "head (a feature extractor: `keel summary`, `keel memory`)")
      ("pooling", po::value<std::string>(), "ResNets without top: avg or max (keras.applications' pooling)");
}

void apply_head_options(const po::variables_map& vm, RunConfig& c) {
  if (vm.count("include-top")) {
    const std::string v = vm["include-top"].as<std::string>();
    if (v != "true" && v != "false") throw UsageError("--include-top must be true or false, got '" + v.substr(0, 100) + "'");
    c.include_top = v == "true";
  }
  if (vm.count("pooling")) c.pooling = vm["pooling"].as<std::string>();
  if (!c.pooling.empty() && c.pooling != "avg" && c.pooling != "max") {
    throw UsageError("--pooling must be avg or max, got '" + c.pooling.substr(0, 100) + "'");
  }
  if (!c.pooling.empty() && c.include_top) throw UsageError("--pooling goes with --include-top false (the head pools already)");
  if (!c.include_top && c.model.rfind("resnet", 0) != 0) throw UsageError("--include-top applies to the ResNets");
}

void add_init_options(po::options_description& d) {
  d.add_options()
      ("init-weights", po::value<std::string>(), "start from a Keras weight file (model.save_weights, model.save, "
                                                 "keras.applications, a keel checkpoint); the optimizer starts fresh")
      ("by-name", po::bool_switch(), "--init-weights: match layers by name (layers the file lacks keep their initial values)")
      ("skip-mismatch", po::bool_switch(), "--init-weights --by-name: skip layers whose weights differ in count or shape");
  add_freeze_option(d);
}

void add_freeze_option(po::options_description& d) {
  d.add_options()("freeze", po::value<std::string>(), "freeze the layers whose name matches this regex (no gradients, no "
                                                      "optimizer slots; frozen BatchNormalization runs in inference mode), "
                                                      "e.g. '^conv'");
}

void apply_init_options(const po::variables_map& vm, RunConfig& c) {
  if (vm.count("freeze")) c.freeze = vm["freeze"].as<std::string>();
  c.init_by_name = vm["by-name"].as<bool>();
  c.init_skip_mismatch = vm["skip-mismatch"].as<bool>();
  if (!vm.count("init-weights")) {
    if (c.init_by_name || c.init_skip_mismatch) throw UsageError("--by-name and --skip-mismatch go with --init-weights FILE");
    return;
  }
  const std::string file = vm["init-weights"].as<std::string>();
  if (!std::filesystem::is_regular_file(file)) throw UsageError("--init-weights: no such file: " + file.substr(0, 300));
  if (c.init_skip_mismatch && !c.init_by_name) {
    throw UsageError("--skip-mismatch needs --by-name (as Keras's load_weights: skip_mismatch only with by_name)");
  }
  c.init_weights = std::filesystem::absolute(file).lexically_normal().string();
}

void load_init_weights(const RunConfig& config, Model& model) {
  if (config.init_weights.empty()) return;
  const KerasWeightsReport r =
      load_keras_weights(config.init_weights, model, {config.init_by_name, config.init_skip_mismatch});
  std::printf("Initialized %lld layers (%lld values) from %s%s\n", static_cast<long long>(r.layers_loaded),
              static_cast<long long>(r.values_loaded), config.init_weights.c_str(), config.init_by_name ? " by name" : "");
  for (const std::string& s : r.skipped) std::printf("  skipped (--skip-mismatch): %s\n", s.c_str());
  if (!r.not_in_file.empty()) {
    std::string names;
    for (const std::string& n : r.not_in_file) names += (names.empty() ? "" : ", ") + n;
    std::printf("  not in the file, left as initialized: %s\n", names.substr(0, 400).c_str());
  }
  std::fflush(stdout);
}

void freeze_layers(const RunConfig& config, Model& model) {
  if (config.freeze.empty()) return;
  std::regex pattern;
  try {
    pattern = compile_untrusted_regex(config.freeze, "--freeze");
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  int frozen = 0;
  for (Layer* layer : model.layers()) {
    if (layer->weights().empty() || !std::regex_search(layer->name(), pattern)) continue;
    layer->set_trainable(false);
    ++frozen;
  }
  if (frozen == 0) {
    throw UsageError("--freeze '" + config.freeze.substr(0, 100) + "' matches no layer with weights of " + config.model +
                     " (see `keel summary --model " + config.model + "` for its layer names)");
  }
}

}  // namespace keel::cli
