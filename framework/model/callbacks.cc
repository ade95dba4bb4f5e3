#include "framework/model/callbacks.h"

#include <unistd.h>

#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "framework/autodiff/variable.h"

namespace keel {

ProgbarLogger::ProgbarLogger(std::FILE* out) : out_(out), tty_(isatty(fileno(out)) != 0) {}

void ProgbarLogger::on_epoch_begin(TrainingState& st) {
  std::fprintf(out_, "Epoch %d/%d\n", st.epoch + 1, st.epochs);
  std::fflush(out_);
  epoch_start_ = last_draw_ = std::chrono::steady_clock::now();
  first_batch_ = st.batch;
}

void ProgbarLogger::on_train_batch_end(TrainingState& st, const Logs& logs) {
  if (!tty_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(100) && st.batch != st.steps_per_epoch) return;
  last_draw_ = now;
  draw(st, logs, false);
}

void ProgbarLogger::on_epoch_end(TrainingState& st, const Logs& logs) { draw(st, logs, true); }

void ProgbarLogger::draw(const TrainingState& st, const Logs& logs, bool final) {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start_).count();
  const int64_t done = st.batch;
  const int64_t timed = std::max<int64_t>(1, done - first_batch_);
  const double per_step = elapsed / static_cast<double>(timed);
  std::string line;
  char buf[160];
  if (st.steps_per_epoch > 0) {
    const int width = 30;
    const int filled = static_cast<int>(width * std::min<int64_t>(done, st.steps_per_epoch) / st.steps_per_epoch);
    std::string bar(static_cast<size_t>(filled), '=');
    if (filled < width) bar += '>';
    bar.resize(width, '.');
    std::snprintf(buf, sizeof buf, "%lld/%lld [%s]", static_cast<long long>(done),
                  static_cast<long long>(st.steps_per_epoch), bar.c_str());
  } else {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(done));
  }
  line += buf;
  if (final) {
    std::snprintf(buf, sizeof buf, " - %.0fs %.0fms/step", elapsed, per_step * 1000.0);
  } else {
    const double eta = st.steps_per_epoch > 0 ? per_step * static_cast<double>(st.steps_per_epoch - done) : 0.0;
    std::snprintf(buf, sizeof buf, " - ETA: %.0fs", eta);
  }
  line += buf;
  // Keras's order: the loss first, then the metrics.
  auto add = [&](const std::string& name, double value) {
    std::snprintf(buf, sizeof buf, " - %s: %.4f", name.c_str(), value);
    line += buf;
  };
  // Keras's order: the loss, the metrics, then val_loss and the validation metrics.
  for (const bool val : {false, true}) {
    const std::string loss_key = val ? "val_loss" : "loss";
    if (auto it = logs.find(loss_key); it != logs.end()) add(loss_key, it->second);
    for (const auto& [name, value] : logs) {
      if (name != loss_key && (name.rfind("val_", 0) == 0) == val) add(name, value);
    }
  }
  if (tty_) {
    std::fprintf(out_, "\r%s\033[K%s", line.c_str(), final ? "\n" : "");
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

void TerminateOnNaN::on_train_batch_end(TrainingState& st, const Logs& logs) {
  const auto loss = logs.find("loss");
  const bool bad_loss = loss != logs.end() && !std::isfinite(loss->second);
  if (!bad_loss && !st.non_finite) return;
  if (st.non_finite) {
    terminated_ = st.non_finite;
  } else {  // logs that did not come from fit's step (a caller's own)
    const int64_t step = st.model != nullptr && st.model->compiled() ? st.model->optimizer().iterations() : st.batch;
    terminated_ = NonFiniteStep{step, loss->second, "", false};
  }
  if (out_ != nullptr) {
    // Keras numbers the batch from 0 within the epoch.
    std::fprintf(out_, "Batch %lld: Invalid %s, terminating training: %s\n", static_cast<long long>(st.batch - 1),
                 bad_loss || terminated_->variable.empty() ? "loss" : "gradient", terminated_->describe().c_str());
    std::fflush(out_);
  }
  st.stop_training = true;
}

namespace {

// The shortest text that reads back as the same double (Python's repr, which Keras's CSV holds).
std::string shortest(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, result.ptr);
}

std::vector<std::string> split(const std::string& line, const std::string& separator) {
  std::vector<std::string> out;
  size_t begin = 0;
  for (size_t at; (at = line.find(separator, begin)) != std::string::npos; begin = at + separator.size()) {
    out.push_back(line.substr(begin, at - begin));
  }
  out.push_back(line.substr(begin));
  return out;
}

}  // namespace

CSVLogger::CSVLogger(std::string filename, std::string separator, bool append)
    : filename_(std::move(filename)), separator_(std::move(separator)), append_(append) {
  if (separator_.empty()) throw std::invalid_argument("CSVLogger: the separator must not be empty");
}

void CSVLogger::on_train_begin(TrainingState&) {
  keys_.clear();
  if (!append_) {
    std::ofstream truncate(filename_, std::ios::trunc);
    if (!truncate) throw std::runtime_error("CSVLogger: cannot write " + filename_);
    return;
  }
  std::ifstream in(filename_);
  std::string header;
  if (in && std::getline(in, header) && !header.empty()) {
    keys_ = split(header, separator_);
    keys_.erase(keys_.begin());  // "epoch"
  }
}

void CSVLogger::on_epoch_end(TrainingState& st, const Logs& logs) {
  std::ofstream out(filename_, std::ios::app);
  if (!out) throw std::runtime_error("CSVLogger: cannot write " + filename_);
  if (keys_.empty()) {
    out << "epoch";
    for (const auto& entry : logs) {  // a std::map: sorted, as Keras sorts them
      keys_.push_back(entry.first);
      out << separator_ << entry.first;
    }
    out << "\n";
  }
  out << st.epoch;
  for (const std::string& key : keys_) {
    const auto it = logs.find(key);
    out << separator_ << (it == logs.end() ? std::string("NA") : shortest(it->second));
  }
  out << "\n";
  out.flush();
  if (!out) throw std::runtime_error("CSVLogger: cannot write " + filename_);
}

bool monitor_is_max(const std::string& monitor, const std::string& mode) {
  if (mode == "min") return false;
  if (mode == "max") return true;
  if (mode != "auto") throw std::invalid_argument("mode must be auto, min or max, got '" + mode + "'");
  return monitor.find("acc") != std::string::npos;
}

namespace {

std::optional<double> monitored(const Logs& logs, const std::string& monitor, const char* who) {
  const auto it = logs.find(monitor);
  if (it != logs.end()) return it->second;
  std::string available;
  for (const auto& entry : logs) available += (available.empty() ? "" : ",") + entry.first;
  std::fprintf(stderr, "warning: %s conditioned on metric `%s` which is not available. Available metrics are: %s\n",
               who, monitor.c_str(), available.c_str());
  return std::nullopt;
}

}  // namespace

EarlyStopping::EarlyStopping(Options options)
    : options_(std::move(options)), max_(monitor_is_max(options_.monitor, options_.mode)) {
  options_.min_delta = std::fabs(options_.min_delta);
}

void EarlyStopping::on_train_begin(TrainingState&) {
  stopped_this_run_ = false;
  if (restored_) return;  // a resumed run goes on from the saved state
  wait_ = 0;
  stopped_epoch_ = 0;
  best_.reset();
  best_epoch_ = 0;
  best_weights_.clear();
}

bool EarlyStopping::is_improvement(double value, double reference) const {
  return max_ ? value - options_.min_delta > reference : value + options_.min_delta < reference;
}

void EarlyStopping::on_epoch_end(TrainingState& st, const Logs& logs) {
  const std::optional<double> current = monitored(logs, options_.monitor, "Early stopping");
  if (!current) return;
  auto keep_weights = [&] {
    if (!options_.restore_best_weights || st.model == nullptr) return;
    best_weights_.clear();
    for (Variable* v : st.model->variables()) {
      const Tensor& t = v->value();
      best_weights_.emplace_back(t.data(), t.data() + t.size());
    }
  };
  if (options_.restore_best_weights && best_weights_.empty()) {
    keep_weights();
    best_epoch_ = st.epoch;
  }
  ++wait_;
  if (!best_ || is_improvement(*current, *best_)) {
    best_ = current;
    best_epoch_ = st.epoch;
    keep_weights();
    // The wait restarts only when the epoch beats the baseline as well as the best so far.
    if (!options_.baseline || is_improvement(*current, *options_.baseline)) wait_ = 0;
    return;
  }
  if (wait_ >= options_.patience && st.epoch > 0) {
    stopped_epoch_ = st.epoch;
    stopped_this_run_ = true;
    st.stop_training = true;
  }
}

void EarlyStopping::on_train_end(TrainingState& st) {
  // Only at the end of training (early stopping or the last epoch), never a run that was interrupted.
  const bool finished = stopped_this_run_ || (st.epoch + 1 >= st.epochs && !st.stop_training);
  if (!finished || !options_.restore_best_weights || best_weights_.empty() || st.model == nullptr) return;
  const std::vector<Variable*> vars = st.model->variables();
  for (size_t i = 0; i < vars.size() && i < best_weights_.size(); ++i) {
    Tensor& t = vars[i]->mutable_value();
    if (!t.is_abstract()) std::copy(best_weights_[i].begin(), best_weights_[i].end(), t.data());
  }
}

nlohmann::json EarlyStopping::get_state() const {
  return {{"wait", wait_}, {"stopped_epoch", stopped_epoch_}, {"best", best_ ? nlohmann::json(*best_) : nlohmann::json()},
          {"best_epoch", best_epoch_}};
}

void EarlyStopping::set_state(const nlohmann::json& state) {
  wait_ = state.at("wait").get<int>();
  stopped_epoch_ = state.at("stopped_epoch").get<int>();
  best_ = state.at("best").is_null() ? std::nullopt : std::optional<double>(state.at("best").get<double>());
  best_epoch_ = state.at("best_epoch").get<int>();
  best_weights_.clear();
  restored_ = true;
}

ReduceLROnPlateau::ReduceLROnPlateau(Options options, std::FILE* out)
    : options_(std::move(options)), out_(out), max_(monitor_is_max(options_.monitor, options_.mode)) {
  if (options_.factor >= 1.0) throw std::invalid_argument("ReduceLROnPlateau does not support a factor >= 1.0");
}

void ReduceLROnPlateau::on_train_begin(TrainingState& st) {
  if (st.model != nullptr && st.model->compiled() && st.model->optimizer().has_schedule()) {
    throw std::invalid_argument("ReduceLROnPlateau needs an optimizer with a plain learning rate, not a schedule");
  }
  if (restored_) {
    if (learning_rate_ && st.model != nullptr) st.model->optimizer().set_learning_rate(*learning_rate_);
    return;
  }
  if (st.model != nullptr && st.model->compiled()) learning_rate_ = st.model->optimizer().learning_rate();
  best_ = max_ ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  cooldown_counter_ = 0;
  wait_ = 0;
}

bool ReduceLROnPlateau::improved(double current) const {
  return max_ ? current > best_ + options_.min_delta : current < best_ - options_.min_delta;
}

void ReduceLROnPlateau::on_epoch_end(TrainingState& st, const Logs& logs) {
  const std::optional<double> current = monitored(logs, options_.monitor, "Learning rate reduction");
  if (!current) return;
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    wait_ = 0;
  }
  if (improved(*current)) {
    best_ = *current;
    wait_ = 0;
    return;
  }
  if (cooldown_counter_ > 0 || ++wait_ < options_.patience) return;
  Optimizer& optimizer = st.model->optimizer();
  const double old_lr = optimizer.learning_rate();
  if (old_lr <= static_cast<float>(options_.min_lr)) return;
  const float new_lr = static_cast<float>(std::max(old_lr * options_.factor, options_.min_lr));
  optimizer.set_learning_rate(new_lr);
  learning_rate_ = new_lr;
  if (out_ != nullptr) {
    std::fprintf(out_, "\nEpoch %d: ReduceLROnPlateau reducing learning rate to %g.\n", st.epoch + 1, new_lr);
    std::fflush(out_);
  }
  cooldown_counter_ = options_.cooldown;
  wait_ = 0;
}

nlohmann::json ReduceLROnPlateau::get_state() const {
  // JSON has no infinity: the initial best (+-inf) is written null.
  return {{"wait", wait_}, {"cooldown_counter", cooldown_counter_},
          {"best", std::isfinite(best_) ? nlohmann::json(best_) : nlohmann::json()},
          {"learning_rate", learning_rate_ ? nlohmann::json(*learning_rate_) : nlohmann::json()}};
}

void ReduceLROnPlateau::set_state(const nlohmann::json& state) {
  wait_ = state.at("wait").get<int>();
  cooldown_counter_ = state.at("cooldown_counter").get<int>();
  const double inf = std::numeric_limits<double>::infinity();
  best_ = state.at("best").is_null() ? (max_ ? -inf : inf) : state.at("best").get<double>();
  if (!state.at("learning_rate").is_null()) learning_rate_ = state.at("learning_rate").get<float>();
  restored_ = true;
}

}  // namespace keel
