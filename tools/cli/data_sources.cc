#include "tools/cli/data_sources.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "framework/core/limits.h"
#include "framework/data/data_error.h"
#include "datasets/example.h"
#include "datasets/image_codec.h"
#include "datasets/image_folder.h"
#include "datasets/image_ops.h"
#include "datasets/tfrecord_dataset.h"
#include "framework/device/context.h"
#include "tools/cli/run_config.h"

namespace keel::cli {
namespace {

namespace fs = std::filesystem;

// Images of more pixels are refused (DataError, so --skip-corrupt skips them): with 4 in flight per
// decoding thread, a few-KB file declaring a 30000x30000 image must not take gigabytes each.
constexpr int64_t kMaxPipelinePixels = int64_t{4096} * 4096;

int64_t input_pixels(const Shape& input) { return input.size() == 3 ? input[0] * input[1] : input[0]; }

Tensor label_for_loss(int64_t id, const std::string& where, const ExampleOptions& o) {
  if (id < 0 || id >= o.classes) {
    throw DataError(where + ": label " + std::to_string(id) + " is outside 0.." + std::to_string(o.classes - 1) +
                    " (the model has " + std::to_string(o.classes) + " classes; see --classes)");
  }
  HostScope host;
  if (!o.one_hot) return Tensor::scalar(static_cast<float>(id));
  Tensor y = Tensor::zeros({o.classes});
  y.data()[id] = 1.0f;
  return y;
}

// A stand-in for an element another process decodes (per-host decoding): zeros of the shapes
// decoding would give.
Element placeholder_example(const ExampleOptions& o) {
  HostScope host;
  return Element{Tensor::zeros(o.input), o.one_hot ? Tensor::zeros({o.classes}) : Tensor::scalar(0.0f)};
}

// With --skip-corrupt, a bad element becomes an empty one (filtered out next) and is counted. The
// filter is there either way, so that a run can be resumed with or without --skip-corrupt (the saved
// state names the pipeline's ops). Elements outside this process's rows are not decoded (see
// ExampleOptions::input_context).
template <class Fn>
Dataset decode_stage(Dataset ds, const ExampleOptions& o, Fn decode) {
  const bool skip = o.skip_corrupt;
  std::shared_ptr<std::atomic<int64_t>> skipped = o.skipped;
  auto decode_or_skip = [decode, skip, skipped](const Element& e) -> Element {
    if (!skip) return decode(e);
    try {
      return decode(e);
    } catch (const DataError& error) {
      if (skipped) ++*skipped;
      std::fprintf(stderr, "keel: skipped (--skip-corrupt): %s\n", error.what());
      return Element{};
    }
  };
  const auto not_skipped = [](const Element& e) { return !e.empty(); };
  if (!o.keyed_decode) return ds.map(decode_or_skip, AUTOTUNE).filter(not_skipped);
  const bool every_element = skip || o.input_context.feeds_everything();
  const InputContext input = o.input_context;
  const Element placeholder = every_element ? Element{} : placeholder_example(o);
  return ds
      .map_with_key(
          [decode_or_skip, every_element, input, placeholder](const Element& e, const ElementKey& key) {
            return every_element || input.feeds(key.index) ? decode_or_skip(e) : placeholder;
          },
          AUTOTUNE)
      .filter(not_skipped);
}

Dataset tfrecord_examples(const DatasetSource& source, const std::string& split, const ExampleOptions& o) {
  const std::string pattern = (fs::path(source.dir) / (split + "-*.tfrecord")).string();
  const std::vector<std::string> patterns{pattern, pattern + ".gz"};
  // list_files expands the patterns once, here.
  const Dataset files = [&] {
    try {
      return Dataset::list_files(patterns, /*shuffle=*/o.training, o.seed);
    } catch (const DataError&) {
      throw DataError("no TFRecord files for split '" + split + "' in " + source.dir + " (expected " + pattern +
                      ", as `keel data export --format tfrecord --out " + source.dir + "` writes)");
    }
  }();
  const int64_t num_files = files.cardinality();
  TFRecordOptions record_options;
  record_options.skip_corrupt = o.skip_corrupt;
  record_options.skipped = o.skipped;
  record_options.include_source = true;
  Dataset records =
      files.interleave(
              [record_options](const Element& f) {
                TFRecordOptions opts = record_options;
                opts.compression = tfrecord_compression_for(f[0].string_value());
                return TFRecordDataset({f[0].string_value()}, opts);
              },
              /*cycle_length=*/o.training ? std::min<int64_t>(num_files, 4) : 1,
              /*block_length=*/1, /*num_parallel_calls=*/o.training ? AUTOTUNE : 0);
  if (o.training) records = records.shuffle(o.shuffle_buffer, o.seed);
  FeatureSpec spec;
  spec["image"] = FixedLenFeature{{}, FeatureType::kString};
  spec["label"] = FixedLenFeature{{}, FeatureType::kInt64};
  return decode_stage(records, o, [spec, o](const Element& e) {
    const std::string& where = e[1].string_value();
    std::map<std::string, Tensor> features;
    try {
      features = parse_single_example(e[0].string_value(), spec);
    } catch (const DataError& error) {
      throw DataError(where + ": " + error.what());
    }
    const Tensor& label = features.at("label");
    return Element{image_for_input(features.at("image").string_value(), where, o.input),
                   label_for_loss(static_cast<int64_t>(label.item()), where, o)};
  });
}

// DIR/<split> when DIR has split folders (as `keel data export` writes), DIR itself when it has
// neither train/ nor test/ (a plain class-per-folder directory serves every split).
fs::path split_folder(const DatasetSource& source, const std::string& split) {
  const fs::path dir = fs::path(source.dir) / split;
  if (fs::is_directory(dir)) return dir;
  const fs::path root(source.dir);
  if (fs::is_directory(root / "train") || fs::is_directory(root / "test")) {
    throw DataError("image folder " + source.dir + " has no '" + split + "' folder (it has split folders, so " +
                    "the classes of split '" + split + "' must be in " + dir.string() + ")");
  }
  return root;
}

Dataset image_examples(const DatasetSource& source, const std::string& split, const ExampleOptions& o) {
  const fs::path dir = split_folder(source, split);
  ImageFolderOptions folder;
  folder.shuffle = o.training;
  folder.seed = o.seed;
  Dataset files = image_files_from_directory(dir.string(), folder);
  return decode_stage(files, o, [o](const Element& e) {
    const std::string& path = e[0].string_value();
    return Element{image_for_input(read_file_bytes(path), path, o.input),
                   label_for_loss(static_cast<int64_t>(e[1].item()), path, o)};
  });
}

}  // namespace

Tensor image_for_input(const std::string& bytes, const std::string& where, const Shape& input) {
  const int channels = input.size() == 3 ? static_cast<int>(input[2]) : 1;
  DecodedImage image;
  try {
    image = decode_image(bytes, channels, std::max(kMaxPipelinePixels, 16 * input_pixels(input)));
  } catch (const DataError& e) {
    throw DataError(where + ": " + e.what());
  }
  HostScope host;
  Tensor x = convert_image_dtype(image);  // (h, w, channels) in [0, 1]
  if (input.size() == 3) {
    if (x.dim(0) != input[0] || x.dim(1) != input[1]) x = resize(x, input[0], input[1], ResizeMethod::kBilinear);
    return x;
  }
  if (x.size() != input[0]) {
    // A configuration mismatch, not a damaged record: never skipped by --skip-corrupt.
    throw UsageError(where + ": a " + shape_string(x.shape()) + " image does not fit the model's flat input of " +
                     std::to_string(input[0]) + " values; train an image model (e.g. --model resnet18) on it");
  }
  return x.reshape({input[0]});
}

DatasetSource parse_dataset_source(const std::string& text) {
  DatasetSource s;
  auto dir_of = [&](size_t prefix) {
    std::string dir = text.substr(prefix);
    if (dir.empty()) throw UsageError("--dataset " + quote_untrusted(text) + " needs a directory after the colon");
    if (!fs::is_directory(dir)) {
      throw UsageError("--dataset " + quote_untrusted(text) + ": not a directory (make one with `keel data export`)");
    }
    return dir;
  };
  if (text == "fashion_mnist") return s;
  if (text.rfind("tfrecord:", 0) == 0) {
    s.kind = DatasetSource::Kind::kTFRecord;
    s.dir = dir_of(9);
    return s;
  }
  if (text.rfind("images:", 0) == 0) {
    s.kind = DatasetSource::Kind::kImages;
    s.dir = dir_of(7);
    return s;
  }
  throw UsageError("unknown dataset '" + quote_untrusted(text) + "' (known: fashion_mnist, tfrecord:DIR, images:DIR)");
}

std::string tfrecord_shard_name(const std::string& split, int64_t shard, int64_t shards,
                                TFRecordCompression compression) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "-%05lld-of-%05lld.tfrecord", static_cast<long long>(shard),
                static_cast<long long>(shards));
  return split + buf + (compression == TFRecordCompression::kGzip ? ".gz" : "");
}

const std::vector<std::string>& fashion_mnist_class_dirs() {
  static const std::vector<std::string> dirs = {"0_tshirt_top", "1_trouser", "2_pullover", "3_dress",   "4_coat",
                                                "5_sandal",     "6_shirt",   "7_sneaker",  "8_bag", "9_ankle_boot"};
  return dirs;
}

const std::vector<std::string>& fashion_mnist_class_names() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                 "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

namespace {

// DIR/dataset_info.json, or null when it is missing or not JSON.
nlohmann::json read_dataset_info(const DatasetSource& source) {
  std::ifstream f(fs::path(source.dir) / "dataset_info.json");
  if (!f) return nullptr;
  nlohmann::json info = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  return info.is_discarded() ? nlohmann::json(nullptr) : info;
}

}  // namespace

std::vector<std::string> dataset_class_names(const DatasetSource& source) {
  if (source.kind == DatasetSource::Kind::kFashionMnist) return fashion_mnist_class_names();
  if (source.kind == DatasetSource::Kind::kImages) {
    // The training split's folders: the labels the run learned.
    return index_image_folder(split_folder(source, "train").string()).class_names;
  }
  const nlohmann::json info = read_dataset_info(source);
  if (!info.is_object()) return {};
  if (info.value("source", "") == "fashion_mnist") return fashion_mnist_class_names();
  std::vector<std::string> names;
  const auto it = info.find("class_names");
  if (it == info.end() || !it->is_array()) return {};
  for (const nlohmann::json& n : *it) {
    if (!n.is_string()) return {};
    names.push_back(quote_untrusted(n.get<std::string>()));
  }
  return names;
}

int64_t file_examples_count(const DatasetSource& source, const std::string& split) {
  if (source.kind == DatasetSource::Kind::kImages) {
    return static_cast<int64_t>(index_image_folder(split_folder(source, split).string()).paths.size());
  }
  if (source.kind == DatasetSource::Kind::kTFRecord) {
    const nlohmann::json info = read_dataset_info(source);
    const nlohmann::json* n = &info;
    for (const char* key : {"splits", split.c_str(), "examples"}) {
      if (!n->is_object() || !n->contains(key)) return -1;
      n = &(*n)[key];
    }
    return n->is_number_integer() ? n->get<int64_t>() : -1;
  }
  return -1;
}

Dataset file_examples(const DatasetSource& source, const std::string& split, const ExampleOptions& options) {
  switch (source.kind) {
    case DatasetSource::Kind::kTFRecord:
      return tfrecord_examples(source, split, options);
    case DatasetSource::Kind::kImages:
      return image_examples(source, split, options);
    case DatasetSource::Kind::kFashionMnist:
      break;
  }
  throw std::logic_error("file_examples: not a file dataset");
}

}  // namespace keel::cli
