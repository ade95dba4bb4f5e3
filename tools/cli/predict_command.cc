// `keel predict RUN|FILE.h5 --input PATH...`: the classes a trained run gives images — files, folders
// of them, or the Examples of TFRecord files — with their scores, as Keras's
// `decode_predictions(model.predict(x), top=k)`.
//
// The run is loaded as `keel evaluate` loads it (its newest checkpoint that verifies, its stored
// configuration, its device), and every image goes through the step of the run's file pipelines
// (image_for_input: decode, scale to [0, 1], resize to the model's input), in batches of the run's
// global batch, so that predict's top class is exactly what `keel evaluate` counts as correct.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <numeric>
#include <optional>

#include "datasets/example.h"
#include "datasets/image_folder.h"
#include "datasets/tfrecord.h"
#include "datasets/tfrecord_dataset.h"
#include "framework/checkpoint/checkpoint.h"
#include "framework/core/limits.h"
#include "framework/data/data_error.h"
#include "framework/device/context.h"
#include "framework/layers/initializers.h"
#include "framework/layers/layer.h"
#include "tools/cli/checkpoint_selection.h"
#include "tools/cli/commands.h"
#include "tools/cli/data_sources.h"
#include "tools/cli/parallel_for.h"
#include "tools/cli/run_config.h"
#include "tools/cli/stored_run.h"

namespace keel::cli {
namespace {

namespace fs = std::filesystem;

bool is_tfrecord_file(const std::string& path) {
  auto ends_with = [&](const char* suffix) {
    const size_t n = std::strlen(suffix);
    return path.size() >= n && path.compare(path.size() - n, n, suffix) == 0;
  };
  return ends_with(".tfrecord") || ends_with(".tfrecord.gz");
}

// One --input expanded: the image files of a folder — those directly in it (sorted), then its class
// folders' as image_dataset_from_directory lists them (so an exported split is read in the order
// `keel evaluate --dataset images:DIR` reads it) — or the file itself.
std::vector<std::string> expand_input(const std::string& input) {
  std::error_code ec;
  if (fs::is_regular_file(input, ec)) return {input};
  if (!fs::is_directory(input, ec)) {
    throw UsageError("--input " + quote_untrusted(input) + ": no such file or directory");
  }
  std::vector<std::string> files;
  bool has_folders = false;
  fs::directory_iterator it(input, ec);
  if (ec) throw UsageError("--input " + quote_untrusted(input) + ": cannot list the folder: " + ec.message());
  for (const fs::directory_entry& e : it) {
    if (e.is_directory(ec)) has_folders = true;
    if (e.is_regular_file(ec) && is_image_file(e.path().string())) files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  if (has_folders) {
    try {
      for (std::string& f : index_image_folder(input).paths) files.push_back(std::move(f));
    } catch (const DataError&) {
      if (files.empty()) throw;  // neither images nor class folders of images: its message says so
    }
  }
  if (files.empty()) {
    throw UsageError("--input " + quote_untrusted(input) + ": the folder holds no .jpg, .jpeg or .png image");
  }
  return files;
}

// The encoded images of every --input, one at a time: image files whole, TFRecord files record by
// record (each a tf.train.Example with `image` = encoded JPEG/PNG bytes, as `keel data export` writes).
class InputReader {
 public:
  struct Item {
    std::string file;
    int64_t record = -1;  // the record's index in `file`; -1 for an image file
    std::string bytes;    // the encoded image
    std::optional<int64_t> label;  // a record's int64 `label`, when its Example has one
    std::string where() const { return record < 0 ? file : file + " record " + std::to_string(record); }
  };

  explicit InputReader(std::vector<std::string> files) : files_(std::move(files)) {
    spec_["image"] = FixedLenFeature{{}, FeatureType::kString};
    spec_["label"] = VarLenFeature{FeatureType::kInt64};
  }

  bool next(Item* item) {
    while (next_file_ < files_.size() || reader_) {
      if (reader_) {
        std::string record;
        const int64_t index = reader_->next_index();
        if (reader_->read(&record)) {
          *item = Item{reader_->path(), index, {}, std::nullopt};
          parse(record, item);
          return true;
        }
        reader_.reset();
        continue;
      }
      const std::string& file = files_[next_file_++];
      if (is_tfrecord_file(file)) {
        reader_ = std::make_unique<TFRecordReader>(file, tfrecord_compression_for(file));
        continue;
      }
      *item = Item{file, -1, read_file_bytes(file), std::nullopt};
      return true;
    }
    return false;
  }

 private:
  void parse(const std::string& record, Item* item) const {
    try {
      const std::map<std::string, Tensor> features = parse_single_example(record, spec_);
      item->bytes = features.at("image").string_value();
      const Tensor& label = features.at("label");
      if (label.size() == 1) item->label = static_cast<int64_t>(label.data()[0]);
    } catch (const DataError& e) {
      throw DataError(item->where() + ": " + e.what());
    }
  }

  std::vector<std::string> files_;
  size_t next_file_ = 0;
  std::unique_ptr<TFRecordReader> reader_;
  FeatureSpec spec_;
};

// The run, built and loaded as `keel evaluate` does. The strategy outlives the model built in it.
struct LoadedRun {
  std::string checkpoint;
  RunConfig config;
  std::unique_ptr<ReplicatedStrategy> strategy;
  std::unique_ptr<Model> model;
};

LoadedRun load_run(const std::string& target) {
  LoadedRun run;
  const SelectedCheckpoint selected = select_target(target, "predict");
  const StoredRun stored = read_stored_run(selected.path);  // within keel's limits, or refused
  run.checkpoint = selected.path;
  run.config = stored.config;
  if (!run.config.include_top) {
    throw UsageError(run.checkpoint + " is a model without its classification head (--include-top false): it gives "
                     "features, not class scores; predict needs a run that classifies");
  }
  clear_session();
  set_random_seed(run.config.seed);
  run.strategy = std::make_unique<ReplicatedStrategy>(run.config.device);
  auto scope = run.strategy->scope();
  run.model = build_model(run.config);
  check_model_matches(stored, *run.model);
  load_model_weights(selected.path, *run.model);
  return run;
}

// The class names of `dataset` (--dataset, whose errors end the command, or else the run's), by
// label id; ids as names where they are unknown.
std::vector<std::string> class_names(const po::variables_map& vm, const RunConfig& config, int64_t classes) {
  const bool given = vm.count("dataset") > 0;
  const std::string dataset = given ? vm["dataset"].as<std::string>() : config.dataset;
  std::vector<std::string> names;
  try {
    names = dataset_class_names(parse_dataset_source(dataset));
  } catch (const std::exception& e) {  // the run's dataset moved or is gone: predictions still stand
    if (given) throw;
    std::fprintf(stderr, "keel predict: note: no class names from %s (%s); classes are named by their ids\n",
                 quote_untrusted(dataset).c_str(), e.what());
  }
  for (auto i = static_cast<int64_t>(names.size()); i < classes; ++i) names.push_back(std::to_string(i));
  names.resize(static_cast<size_t>(classes));
  return names;
}

// Prints each prediction as it is made: text lines, or one JSON object whose "predictions" array is
// streamed (the field names are a contract; README "keel predict").
class PredictionPrinter {
 public:
  PredictionPrinter(bool json, int64_t top_k, std::vector<std::string> names)
      : json_(json), top_k_(top_k), names_(std::move(names)) {}

  void begin(const LoadedRun& run) {
    if (!json_) {
      std::printf("%s (%s, trained on %s): top %lld classes per image\n", run.checkpoint.c_str(),
                  run.config.model.c_str(), run.config.dataset.c_str(), static_cast<long long>(top_k_));
      return;
    }
    const nlohmann::json head{{"checkpoint", run.checkpoint}, {"model", run.config.model},
                              {"dataset", run.config.dataset}, {"class_names", names_}, {"top_k", top_k_}};
    const std::string text = head.dump();
    std::printf("%s, \"predictions\": [", text.substr(0, text.size() - 1).c_str());
  }

  // scores: this item's row of the model's output, one score per class.
  void print(const InputReader::Item& item, const float* scores) {
    std::vector<int64_t> order(names_.size());
    std::iota(order.begin(), order.end(), 0);
    // Ties keep the lower class first, as argmax (and so evaluate's accuracy) does.
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
    order.resize(static_cast<size_t>(top_k_));
    if (json_) {
      nlohmann::json top = nlohmann::json::array();
      for (int64_t c : order) top.push_back({{"class", c}, {"name", names_[static_cast<size_t>(c)]}, {"score", scores[c]}});
      nlohmann::json p{{"input", item.file},
                       {"record", item.record < 0 ? nlohmann::json(nullptr) : nlohmann::json(item.record)},
                       {"label", item.label ? nlohmann::json(*item.label) : nlohmann::json(nullptr)},
                       {"top_k", top}};
      std::printf("%s%s", count_ ? ", " : "", p.dump().c_str());
    } else {
      std::printf("%s:", item.where().c_str());
      for (size_t i = 0; i < order.size(); ++i) {
        std::printf("%s %s %.4f", i ? "," : "", names_[static_cast<size_t>(order[i])].c_str(), scores[order[i]]);
      }
      std::printf("\n");
    }
    ++count_;
  }

  void end() {
    if (json_) std::printf("], \"count\": %lld}\n", static_cast<long long>(count_));
    std::fflush(stdout);
  }

 private:
  bool json_;
  int64_t top_k_;
  std::vector<std::string> names_;
  int64_t count_ = 0;
};

// Classifies `items` (at most one global batch) and prints them.
void predict_batch(LoadedRun& run, const std::vector<InputReader::Item>& items, PredictionPrinter& printer) {
  const Shape input = run.model->input_shape();
  Shape shape = input;
  shape.insert(shape.begin(), static_cast<int64_t>(items.size()));
  Tensor batch;
  {
    HostScope host;
    batch = Tensor::empty(shape);
  }
  const int64_t per_image = num_elements(input);
  parallel_for(static_cast<int64_t>(items.size()), [&](int64_t i) {
    const InputReader::Item& item = items[static_cast<size_t>(i)];
    const Tensor x = image_for_input(item.bytes, item.where(), input);  // decoded on this thread, in host memory
    std::copy_n(x.data(), per_image, batch.data() + i * per_image);
  });
  const Tensor scores = run.model->predict(batch, run.config.global_batch());
  const int64_t classes = scores.dim(1);
  for (size_t i = 0; i < items.size(); ++i) printer.print(items[i], scores.data() + static_cast<int64_t>(i) * classes);
}

po::options_description predict_options() {
  po::options_description d(
      "Usage: keel predict RUN_DIR|CHECKPOINT --input PATH... [--top-k K] [--json]\n\n"
      "The classes a trained run gives images, with their scores (Keras's decode_predictions). PATH is an image\n"
      "(.jpg, .jpeg, .png), a folder of them (and of class folders, as `keel data export` writes), or TFRecord\n"
      "files (.tfrecord[.gz], Examples with image = encoded JPEG/PNG bytes). Images are decoded, scaled and\n"
      "resized to the run's input exactly as `keel evaluate --dataset images:DIR` does.");
  d.add_options()("help,h", "this help")
      ("target", po::value<std::string>(), "a run directory (its newest checkpoint that verifies) or a ckpt-<step>.h5 file")
      ("input", po::value<std::vector<std::string>>()->multitoken(), "images, folders of images or TFRecord files (repeatable)")
      ("top-k", po::value<int64_t>()->default_value(5), "classes shown per image, best first (at most the model's classes)")
      ("dataset", po::value<std::string>(), "take the class names from this dataset (default: the run's)")
      ("json", po::bool_switch(), "print one JSON object: {\"checkpoint\", \"model\", \"dataset\", \"class_names\", "
                                  "\"top_k\", \"predictions\": [{\"input\", \"record\", \"label\", \"top_k\": [{\"class\", \"name\", "
                                  "\"score\"}]}], \"count\"}");
  add_host_options(d);
  return d;
}

}  // namespace

int predict_command(const std::vector<std::string>& args) {
  const po::options_description d = predict_options();
  po::positional_options_description pos;
  pos.add("target", 1);
  const po::variables_map vm = parse_args(args, d, &pos);
  if (vm.count("help")) {
    std::cout << d << "\n";
    return kExitOk;
  }
  apply_host_options(vm);
  if (!vm.count("target")) {
    throw UsageError("keel predict needs a run directory or checkpoint before --input (which takes every path after "
                     "it), e.g. `keel predict checkpoints/mlp --input img.png`");
  }
  if (!vm.count("input")) throw UsageError("keel predict needs --input PATH: an image, a folder of images or TFRecord files");
  const int64_t top_k = vm["top-k"].as<int64_t>();
  if (top_k < 1) throw UsageError("--top-k must be at least 1, got " + std::to_string(top_k));
  std::vector<std::string> files;
  for (const std::string& input : vm["input"].as<std::vector<std::string>>()) {
    for (std::string& f : expand_input(input)) files.push_back(std::move(f));
  }
  LoadedRun run = load_run(vm["target"].as<std::string>());
  const int64_t classes = run.model->output_shape().back();
  PredictionPrinter printer(vm["json"].as<bool>(), std::min(top_k, classes), class_names(vm, run.config, classes));
  printer.begin(run);
  InputReader reader(std::move(files));
  std::vector<InputReader::Item> items;
  InputReader::Item item;
  while (reader.next(&item)) {
    items.push_back(std::move(item));
    if (static_cast<int64_t>(items.size()) == run.config.global_batch()) {
      predict_batch(run, items, printer);
      items.clear();
    }
  }
  if (!items.empty()) predict_batch(run, items, printer);
  printer.end();
  return kExitOk;
}

}  // namespace keel::cli
