#include "framework/checkpoint/model_checkpoint.h"

#include <filesystem>
#include <limits>
#include <stdexcept>

#include "framework/checkpoint/checkpoint_snapshot.h"
#include "framework/checkpoint/run_directory.h"

namespace keel {

ModelCheckpoint::ModelCheckpoint(std::string filepath, Options options, std::FILE* out)
    : filepath_(std::move(filepath)), options_(std::move(options)), out_(out),
      max_(monitor_is_max(options_.monitor, options_.mode)) {
  if (filepath_.empty()) throw std::invalid_argument("ModelCheckpoint: filepath must not be empty");
}

void ModelCheckpoint::on_train_begin(TrainingState&) {
  if (restored_) return;  // a resumed run goes on from the saved best
  best_ = options_.initial_value_threshold;
}

std::string ModelCheckpoint::path_for(int epoch) const {
  std::string path = filepath_;
  const std::string key = "{epoch}";
  for (size_t at; (at = path.find(key)) != std::string::npos;) path.replace(at, key.size(), std::to_string(epoch + 1));
  return path;
}

void ModelCheckpoint::save(TrainingState& st, const std::string& path) {
  TrainState state;
  if (state_fn_) {
    state = state_fn_(st);
  } else {
    state.step = st.model->optimizer().iterations();
    state.epoch = st.epoch + 1;
  }
  const CheckpointSnapshot snapshot = snapshot_checkpoint(*st.model, st.model->optimizer(), state);
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);  // as Keras makes the file's directory
  if (ec) throw CheckpointError("ModelCheckpoint: cannot create " + parent.string() + ": " + ec.message());
  replace_file(
      path, [&](const std::string& tmp) { write_checkpoint(tmp, snapshot); },
      [](const std::string& tmp) { verify_checkpoint(tmp); });
}

void ModelCheckpoint::on_epoch_end(TrainingState& st, const Logs& logs) {
  const std::string path = path_for(st.epoch);
  if (!options_.save_best_only) {
    if (out_ != nullptr && options_.verbose > 0) std::fprintf(out_, "\nEpoch %d: saving model to %s\n", st.epoch + 1, path.c_str());
    save(st, path);
    return;
  }
  const auto it = logs.find(options_.monitor);
  if (it == logs.end()) {
    std::fprintf(stderr, "warning: Can save best model only with %s available, skipping.\n", options_.monitor.c_str());
    return;
  }
  const double current = it->second;
  const double inf = std::numeric_limits<double>::infinity();
  const double best = best_.value_or(max_ ? -inf : inf);
  if (max_ ? current > best : current < best) {
    if (out_ != nullptr && options_.verbose > 0) {
      std::fprintf(out_, "\nEpoch %d: %s improved from %.5f to %.5f, saving model to %s\n", st.epoch + 1,
                   options_.monitor.c_str(), best, current, path.c_str());
    }
    best_ = current;
    save(st, path);
  } else if (out_ != nullptr && options_.verbose > 0) {
    std::fprintf(out_, "\nEpoch %d: %s did not improve from %.5f\n", st.epoch + 1, options_.monitor.c_str(), best);
  }
  if (out_ != nullptr) std::fflush(out_);
}

nlohmann::json ModelCheckpoint::get_state() const { return {{"best", best_ ? nlohmann::json(*best_) : nlohmann::json()}}; }

void ModelCheckpoint::set_state(const nlohmann::json& state) {
  const nlohmann::json& best = state.at("best");
  best_ = best.is_null() ? std::nullopt : std::optional<double>(best.get<double>());
  restored_ = true;
}

}  // namespace keel
