#include "tools/cli/fit_callbacks.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace keel::cli {

void add_callback_options(po::options_description& d) {
  d.add_options()
      ("metrics", po::value<std::string>(), "metrics by Keras's names beside accuracy, comma-separated: top_k_categorical_accuracy (k=5; sparse_top_k_categorical_accuracy with --loss sparse_categorical_crossentropy)")
      ("validation-split", po::value<double>(), "Fashion-MNIST: validate on the last fraction F of the training examples, taken before shuffling (Keras's validation_split)")
      ("validation-data", po::value<std::string>(), "validate on a split of the dataset: test")
      ("validation-freq", po::value<int>(), "validate after every N-th epoch (default 1)")
      ("early-stopping-patience", po::value<int>(), "Keras's EarlyStopping: stop after N epochs without improvement")
      ("early-stopping-monitor", po::value<std::string>(), "the value EarlyStopping watches (default val_loss)")
      ("restore-best-weights", po::bool_switch(), "EarlyStopping: end with the best epoch's weights")
      ("reduce-lr-patience", po::value<int>(), "Keras's ReduceLROnPlateau on val_loss: lower the rate after N epochs without improvement")
      ("reduce-lr-factor", po::value<double>(), "ReduceLROnPlateau's factor (default 0.1)")
      ("save-best-only", po::bool_switch(), "Keras's ModelCheckpoint(save_best_only=True): keep the best epoch in RUN/best.h5")
      ("checkpoint-monitor", po::value<std::string>(), "the value ModelCheckpoint watches (default val_loss)")
      ("tensorboard", po::bool_switch(), "Keras's TensorBoard: scalars per epoch in RUN/logs/{train,validation}");
}

void apply_callback_options(const po::variables_map& vm, RunConfig& c) {
  if (vm.count("metrics")) {
    c.metrics = {"accuracy"};
    std::stringstream names(vm["metrics"].as<std::string>());
    for (std::string name; std::getline(names, name, ',');) {
      if (name.empty()) throw UsageError("--metrics: an empty name in '" + vm["metrics"].as<std::string>() + "'");
      if (name != "accuracy") c.metrics.push_back(name);
    }
    try {
      check_metrics(c.metrics, make_loss(c.loss)->sparse_labels());
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--metrics: ") + e.what());
    }
  }
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
  if (vm["save-best-only"].as<bool>()) c.save_best_only = true;
  if (vm.count("checkpoint-monitor")) c.checkpoint_monitor = vm["checkpoint-monitor"].as<std::string>();
  if (vm.count("checkpoint-monitor") && !c.save_best_only) throw UsageError("--checkpoint-monitor needs --save-best-only");
  if (vm["tensorboard"].as<bool>()) c.tensorboard = true;
  const bool validates = c.validation_split > 0.0 || !c.validation_data.empty();
  const bool watches_val = (c.early_stopping_patience >= 0 && c.early_stopping_monitor.rfind("val_", 0) == 0) ||
                           c.reduce_lr_patience >= 0 || (c.save_best_only && c.checkpoint_monitor.rfind("val_", 0) == 0);
  if (watches_val && !validates) {
    throw UsageError("EarlyStopping, ReduceLROnPlateau and --save-best-only watch val_ values: give --validation-split F "
                     "or --validation-data test (or a --early-stopping-monitor/--checkpoint-monitor without val_)");
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

FitCallbacks::FitCallbacks(const RunConfig& config, const RunDirectory& dir, int initial_epoch,
                           const nlohmann::json& state, std::vector<std::vector<float>> best_weights, bool quiet,
                           bool writes_files) {
  const std::string csv_path = (std::filesystem::path(dir.dir()) / "history.csv").string();
  if (writes_files && initial_epoch < 0) {
    std::filesystem::remove(csv_path);
  } else if (writes_files) {
    keep_rows_before(csv_path, initial_epoch);
  }
  if (writes_files) csv_ = std::make_unique<CSVLogger>(csv_path, ",", /*append=*/true);
  auto restore = [&](const char* name, auto& callback) {
    if (state.is_object() && state.contains(name)) callback->set_state(state[name]);
  };
  if (config.early_stopping_patience >= 0) {
    EarlyStopping::Options o;
    o.monitor = config.early_stopping_monitor;
    o.patience = config.early_stopping_patience;
    o.restore_best_weights = config.restore_best_weights;
    early_stopping_ = std::make_unique<EarlyStopping>(o);
    restore("EarlyStopping", early_stopping_);
    if (config.restore_best_weights) early_stopping_->set_best_weights(std::move(best_weights));
  }
  if (config.reduce_lr_patience >= 0) {
    ReduceLROnPlateau::Options o;
    o.patience = config.reduce_lr_patience;
    o.factor = config.reduce_lr_factor;
    reduce_lr_ = std::make_unique<ReduceLROnPlateau>(o, quiet ? nullptr : stdout);
    restore("ReduceLROnPlateau", reduce_lr_);
  }
  if (config.save_best_only && writes_files) {
    ModelCheckpoint::Options o;
    o.monitor = config.checkpoint_monitor;
    o.save_best_only = true;
    o.verbose = quiet ? 0 : 1;
    best_ = std::make_unique<ModelCheckpoint>(dir.best_path(), o, quiet ? nullptr : stdout);
    restore("ModelCheckpoint", best_);
  }
  if (config.tensorboard && writes_files) {
    const std::string log_dir = (std::filesystem::path(dir.dir()) / "logs").string();
    if (initial_epoch < 0) std::filesystem::remove_all(log_dir);  // a new run's logs start empty
    tensorboard_ = std::make_unique<TensorBoard>(log_dir);
  }
}

void FitCallbacks::add_to(FitOptions& fit) {
  // Keras's order: each callback sees the epoch's logs; the row is written after all have acted
  // (TensorBoard's learning rate is the one the next epoch trains with, as in Keras).
  if (reduce_lr_) fit.callbacks.push_back(reduce_lr_.get());
  if (early_stopping_) fit.callbacks.push_back(early_stopping_.get());
  if (best_) fit.callbacks.push_back(best_.get());
  if (csv_) fit.callbacks.push_back(csv_.get());
  if (tensorboard_) fit.callbacks.push_back(tensorboard_.get());
}

nlohmann::json FitCallbacks::state() const {
  nlohmann::json j;
  if (early_stopping_) j["EarlyStopping"] = early_stopping_->get_state();
  if (reduce_lr_) j["ReduceLROnPlateau"] = reduce_lr_->get_state();
  if (best_) j["ModelCheckpoint"] = best_->get_state();
  return j;
}

const std::vector<std::vector<float>>& FitCallbacks::best_weights() const {
  static const std::vector<std::vector<float>> none;
  return early_stopping_ ? early_stopping_->best_weights() : none;
}

}  // namespace keel::cli
