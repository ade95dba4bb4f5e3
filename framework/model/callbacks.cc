#include "framework/model/callbacks.h"

#include <unistd.h>

#include <cmath>
#include <string>

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
  if (auto it = logs.find("loss"); it != logs.end()) add("loss", it->second);
  for (const auto& [name, value] : logs) {
    if (name != "loss") add(name, value);
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

}  // namespace keel
