#include "datasets/tensorboard.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>

#include "datasets/tensorboard_event.pb.h"
#include "datasets/tfrecord.h"
#include "framework/data/data_error.h"
#include "framework/device/ledger.h"

namespace keel {

namespace fs = std::filesystem;

namespace {

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// TensorFlow's name: events.out.tfevents.<seconds>.<host>.<pid>.<n>.v2 (n: files this process made).
std::string event_file_name() {
  static std::atomic<int> made{0};
  char host[256] = "localhost";
  if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "localhost");
  host[sizeof host - 1] = '\0';
  const auto seconds = static_cast<long long>(wall_time_now());
  return "events.out.tfevents." + std::to_string(seconds) + "." + host + "." + std::to_string(::getpid()) + "." +
         std::to_string(made++) + ".v2";
}

bool is_event_file(const fs::path& path) {
  return path.filename().string().rfind("events.out.tfevents.", 0) == 0;
}

}  // namespace

// One directory's events file, made when the first event is written.
class TensorBoard::Writer {
 public:
  explicit Writer(std::string dir) : dir_(std::move(dir)) {}
  void write(int64_t step, const std::vector<std::pair<std::string, float>>& scalars) {
    if (!records_) open();
    proto::Event event;
    event.set_wall_time(wall_time_now());
    event.set_step(step);
    for (const auto& [tag, value] : scalars) {
      proto::Summary::Value* v = event.mutable_summary()->add_value();
      v->set_tag(tag);
      v->set_simple_value(value);
    }
    records_->write(event.SerializeAsString());
    records_->flush();  // TensorBoard reads a file while it grows
  }
  void close() {
    if (records_) records_->close();
  }

 private:
  void open() {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec) throw DataError("TensorBoard: cannot create " + dir_ + ": " + ec.message());
    records_ = std::make_unique<TFRecordWriter>((fs::path(dir_) / event_file_name()).string());
    proto::Event first;
    first.set_wall_time(wall_time_now());
    first.set_step(0);
    first.set_file_version("brain.Event:2");
    records_->write(first.SerializeAsString());
  }
  std::string dir_;
  std::unique_ptr<TFRecordWriter> records_;
};

TensorBoard::TensorBoard(std::string log_dir) : log_dir_(std::move(log_dir)) {}
TensorBoard::~TensorBoard() = default;

TensorBoard::Writer& TensorBoard::writer(const std::string& name) {
  std::unique_ptr<Writer>& w = name == "train" ? train_ : validation_;
  if (!w) w = std::make_unique<Writer>((fs::path(log_dir_) / name).string());
  return *w;
}

void TensorBoard::on_train_begin(TrainingState&) {
  last_written_ = -1;
  for (const char* name : {"train", "validation"}) {
    for (const EventScalars& e : read_event_files((fs::path(log_dir_) / name).string())) {
      if (!e.scalars.empty()) last_written_ = std::max(last_written_, e.step);
    }
  }
}

void TensorBoard::on_epoch_end(TrainingState& st, const Logs& logs) {
  if (st.epoch <= last_written_) return;  // the files already hold this epoch
  std::vector<std::pair<std::string, float>> train, validation;
  for (const auto& [name, value] : logs) {
    const bool val = name.rfind("val_", 0) == 0;
    (val ? validation : train).emplace_back("epoch_" + name.substr(val ? 4 : 0), static_cast<float>(value));
  }
  if (st.model != nullptr && st.model->compiled()) {
    const Optimizer& optimizer = st.model->optimizer();
    train.emplace_back("epoch_learning_rate", optimizer.learning_rate_at(optimizer.iterations()));
    const Ledger& ledger = st.model->strategy().ledger();
    for (int c = 0; c < ledger.num_cores(); ++c) {
      const std::string prefix = "epoch_hbm_peak_bytes/core_" + std::to_string(c) + "/";
      for (int k = 0; k < kNumCategories; ++k) {
        const auto category = static_cast<Category>(k);
        train.emplace_back(prefix + category_name(category), static_cast<float>(ledger.core(c).stat(category).peak));
      }
      train.emplace_back(prefix + "total", static_cast<float>(ledger.core(c).total().peak));
    }
  }
  writer("train").write(st.epoch, train);
  if (!validation.empty()) writer("validation").write(st.epoch, validation);
}

void TensorBoard::on_train_end(TrainingState&) {
  if (train_) train_->close();
  if (validation_) validation_->close();
}

std::vector<EventScalars> read_event_files(const std::string& dir) {
  std::vector<EventScalars> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_regular_file() && is_event_file(entry.path())) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& file : files) {
    TFRecordReader reader(file.string(), TFRecordCompression::kNone, /*skip_corrupt=*/true);
    std::string record;
    while (reader.read(&record)) {
      proto::Event event;
      if (!event.ParseFromString(record)) throw DataError(file.string() + ": a record is not a TensorBoard Event");
      EventScalars e;
      e.step = event.step();
      e.wall_time = event.wall_time();
      e.file_version = event.file_version();
      for (const proto::Summary::Value& v : event.summary().value()) e.scalars.emplace_back(v.tag(), v.simple_value());
      out.push_back(std::move(e));
    }
  }
  return out;
}

}  // namespace keel
