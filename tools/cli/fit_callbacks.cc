#include "tools/cli/fit_callbacks.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace keel::cli {

void add_callback_options(po::options_description& d) {
  d.add_options()
      ("validation-split", po::value<double>(), "Fashion-MNIST: validate on the last fraction F of the training examples, taken before shuffling (Keras's validation_split)")
      ("validation-data", po::value<std::string>(), "validate on a split of the dataset: test")
      ("validation-freq", po::value<int>(), "validate after every N-th epoch (default 1)")
      ("early-stopping-patience", po::value<int>(), "Keras's EarlyStopping: stop after N epochs without improvement")
      ("early-stopping-monitor", po::value<std::string>(), "the value EarlyStopping watches (default val_loss)")
      ("restore-best-weights", po::bool_switch(), "EarlyStopping: end with the best epoch's weights")
      ("reduce-lr-patience", po::value<int>(), "Keras's ReduceLROnPlateau on val_loss: lower the rate after N epochs without improvement")
      ("reduce-lr-factor", po::value<double>(), "ReduceLROnPlateau's factor (default 0.1)");
}

void apply_callback_options(const po::variables_map& vm, RunConfig& c) {
  if (vm.count("validation-split")) c.validation_split = vm["validation-split"].as<double>();
  if (!(c.validation_split >= 0.0 && c.validation_split < 1.0)) throw UsageError("--validation-split must be in [0, 1)");
  if (vm.count("validation-data")) c.validation_data = vm["validation-data"].as<std::string>();
  if (!c.validation_data.empty() && c.validation_data != "test") throw UsageError("--validation-data must be test");
  if (c.validation_split > 0.0 && !c.validation_data.empty()) throw UsageError("give --validation-split or --validation-data, not both");
  if (vm.count("validation-freq")) c.validation_freq = vm["validation-freq"].as<int>();
  if (c.validation_freq <= 0) throw UsageError("--validation-freq must be positive");
  if (vm.count("early-stopping-patience")) c.early_stopping_patience = vm["early-stopping-patience"].as<int>();
  if (vm.count("early-stopping-monitor")) c.early_stopping_monitor = vm["early-stopping-monitor"].as<std::string>();
  if (vm["restore-best-weights"].as<bool>()) c.restore_best_weights = true;
  if (vm.count("reduce-lr-patience")) c.reduce_lr_patience = vm["reduce-lr-patience"].as<int>();
  if (vm.count("reduce-lr-factor")) c.reduce_lr_factor = vm["reduce-lr-factor"].as<double>();
  if (!(c.reduce_lr_factor > 0.0 && c.reduce_lr_factor < 1.0)) throw UsageError("--reduce-lr-factor must be in (0, 1)");
  const bool validates = c.validation_split > 0.0 || !c.validation_data.empty();
  const bool watches_val = (c.early_stopping_patience >= 0 && c.early_stopping_monitor.rfind("val_", 0) == 0) ||
                           c.reduce_lr_patience >= 0;
  if (watches_val && !validates) {
    throw UsageError("EarlyStopping and ReduceLROnPlateau watch val_ values: give --validation-split F or --validation-data test");
  }
  if (c.reduce_lr_patience >= 0 && c.lr_schedule != "constant") {
    throw UsageError("--reduce-lr-patience needs --lr-schedule constant (it changes the learning rate itself)");
  }
}

namespace {

// Keeps the header and the rows of epochs before `initial_epoch` (all rows: < 0 keeps none).
void keep_rows_before(const std::string& path, int initial_epoch) {
  std::ifstream in(path);
  if (!in) return;
  std::string line, kept;
  bool header = true;
  while (std::getline(in, line)) {
    if (header || std::atoi(line.c_str()) < initial_epoch) kept += line + "\n";
    header = false;
  }
  in.close();
  std::ofstream(path, std::ios::trunc) << kept;
}

}  // namespace

FitCallbacks::FitCallbacks(const RunConfig& config, const std::string& run_dir, int initial_epoch,
                           const nlohmann::json& state, bool quiet) {
  const std::string csv_path = (std::filesystem::path(run_dir) / "history.csv").string();
  if (initial_epoch < 0) {
    std::filesystem::remove(csv_path);
  } else {
    keep_rows_before(csv_path, initial_epoch);
  }
  csv_ = std::make_unique<CSVLogger>(csv_path, ",", /*append=*/true);
  if (config.early_stopping_patience >= 0) {
    EarlyStopping::Options o;
    o.monitor = config.early_stopping_monitor;
    o.patience = config.early_stopping_patience;
    o.restore_best_weights = config.restore_best_weights;
    early_stopping_ = std::make_unique<EarlyStopping>(o);
    if (state.is_object() && state.contains("EarlyStopping")) early_stopping_->set_state(state["EarlyStopping"]);
  }
  if (config.reduce_lr_patience >= 0) {
    ReduceLROnPlateau::Options o;
    o.patience = config.reduce_lr_patience;
    o.factor = config.reduce_lr_factor;
    reduce_lr_ = std::make_unique<ReduceLROnPlateau>(o, quiet ? nullptr : stdout);
    if (state.is_object() && state.contains("ReduceLROnPlateau")) reduce_lr_->set_state(state["ReduceLROnPlateau"]);
  }
}

void FitCallbacks::add_to(FitOptions& fit) {
  // Keras's order: each callback sees the epoch's logs; the row is written after both have acted.
  if (reduce_lr_) fit.callbacks.push_back(reduce_lr_.get());
  if (early_stopping_) fit.callbacks.push_back(early_stopping_.get());
  fit.callbacks.push_back(csv_.get());
}

nlohmann::json FitCallbacks::state() const {
  nlohmann::json j;
  if (early_stopping_) j["EarlyStopping"] = early_stopping_->get_state();
  if (reduce_lr_) j["ReduceLROnPlateau"] = reduce_lr_->get_state();
  return j;
}

}  // namespace keel::cli
