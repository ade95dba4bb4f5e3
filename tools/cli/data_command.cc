// `keel data export`: Fashion-MNIST as real files — TFRecords of tf.train.Examples, or folders of JPEG
// or PNG images — for the file-based input pipelines (`--dataset tfrecord:DIR`, `--dataset images:DIR`).
//
// Layout of DIR (see README):
//   tfrecord: <split>-<shard>-of-<shards>.tfrecord[.gz], each record an Example with
//             image = encoded JPEG/PNG bytes (bytes_list), label = class id (int64_list)
//   jpeg|png: <split>/<class>/<index>.<ext>, classes named "<id>_<name>" so that sorting the names
//             (as image_dataset_from_directory does) gives Fashion-MNIST's label order
//   dataset_info.json: what was written (format, classes, counts, files)
// The export is built in a sibling temporary directory and renamed into place at the end, so DIR is
// never half-written; an existing DIR is replaced only with --overwrite.
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "framework/data/data_error.h"
#include "datasets/example.h"
#include "datasets/fashion_mnist.h"
#include "datasets/idx.h"
#include "datasets/image_codec.h"
#include "datasets/tfrecord.h"
#include "tools/cli/commands.h"
#include "tools/cli/data_sources.h"
#include "tools/cli/parallel_for.h"
#include "tools/cli/run_config.h"

namespace keel::cli {
namespace {

namespace fs = std::filesystem;

struct ExportOptions {
  std::string format;                 // tfrecord | jpeg | png
  std::string image_format = "jpeg";  // inside TFRecords: jpeg | png
  fs::path out;
  int64_t shards = 1;
  std::vector<std::string> splits{"train", "test"};
  int quality = 95;
  TFRecordCompression compression = TFRecordCompression::kNone;
  std::string data_dir = kFashionMnistDefaultDir;
  bool overwrite = false;
};

struct RawSplit {
  int64_t n = 0;
  const uint8_t* pixels = nullptr;  // (n, 28, 28)
  const uint8_t* labels = nullptr;  // (n,)
};

std::string encode(const std::string& format, const uint8_t* pixels, int quality) {
  if (format == "png") return encode_png(pixels, 28, 28, 1);
  return encode_jpeg(pixels, 28, 28, 1, quality);
}

nlohmann::json export_tfrecords(const ExportOptions& o, const std::string& split, const RawSplit& data,
                                 const fs::path& dir) {
  nlohmann::json files = nlohmann::json::array();
  const int64_t shards = std::min<int64_t>(o.shards, std::max<int64_t>(data.n, 1));
  std::vector<std::string> names(static_cast<size_t>(shards));
  for (int64_t s = 0; s < shards; ++s) {
    names[static_cast<size_t>(s)] = tfrecord_shard_name(split, s, shards, o.compression);
    files.push_back(names[static_cast<size_t>(s)]);
  }
  // Shard s holds examples [n*s/shards, n*(s+1)/shards): contiguous, in the IDX order.
  parallel_for(shards, [&](int64_t s) {
    TFRecordWriter writer((dir / names[static_cast<size_t>(s)]).string(), o.compression);
    for (int64_t i = data.n * s / shards; i < data.n * (s + 1) / shards; ++i) {
      ExampleBuilder example;
      example.add_bytes("image", encode(o.image_format, data.pixels + i * 28 * 28, o.quality));
      example.add_int64("label", {static_cast<int64_t>(data.labels[i])});
      writer.write(example.serialize());
    }
    writer.close();
  });
  return {{"examples", data.n}, {"files", files}};
}

nlohmann::json export_images(const ExportOptions& o, const std::string& split, const RawSplit& data,
                             const fs::path& dir) {
  for (const std::string& c : fashion_mnist_class_dirs()) fs::create_directories(dir / split / c);
  const std::string ext = o.format == "png" ? ".png" : ".jpg";
  parallel_for(data.n, [&](int64_t i) {
    char name[32];
    std::snprintf(name, sizeof name, "%05lld", static_cast<long long>(i));
    const fs::path path = dir / split / fashion_mnist_class_dirs()[data.labels[i]] / (name + ext);
    const std::string bytes = encode(o.format, data.pixels + i * 28 * 28, o.quality);
    std::ofstream f(path, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.close();
    if (!f) throw DataError("cannot write " + path.string() + " (disk full or not writable?)");
  });
  return {{"examples", data.n}, {"directory", split}};
}

void add_export_options(po::options_description& d) {
  d.add_options()("help,h", "this help")
      ("format", po::value<std::string>(), "tfrecord, jpeg or png (required)")
      ("out", po::value<std::string>(), "output directory (required); replaced only with --overwrite")
      ("shards", po::value<int64_t>(), "tfrecord: files per split (default 1)")
      ("image-format", po::value<std::string>(), "tfrecord: how images are encoded inside, jpeg or png (default jpeg)")
      ("compression", po::value<std::string>(), "tfrecord: \"\" or GZIP (default none)")
      ("quality", po::value<int>(), "JPEG quality 1..100 (default 95)")
      ("split", po::value<std::string>(), "train, test or all (default all)")
      ("data-dir", po::value<std::string>(), "Fashion-MNIST IDX files (default /usr/share/datasets/fashion-mnist)")
      ("overwrite", po::bool_switch(), "replace an existing output directory")
      ("json", po::bool_switch(), "print one JSON object: dataset_info.json's fields (\"format\", \"source\", "
                                  "\"image_shape\", \"class_names\", \"splits\", ...) and \"out\", \"examples\", \"bytes\"");
}

// --format and --out (required).
void parse_format_and_out(const po::variables_map& vm, ExportOptions& o) {
  if (!vm.count("format")) throw UsageError("--format is required: tfrecord, jpeg or png");
  o.format = vm["format"].as<std::string>();
  if (o.format != "tfrecord" && o.format != "jpeg" && o.format != "png") {
    throw UsageError("unknown --format '" + o.format + "' (known: tfrecord, jpeg, png)");
  }
  if (!vm.count("out")) throw UsageError("--out DIR is required");
  o.out = fs::absolute(fs::path(vm["out"].as<std::string>())).lexically_normal();
  if (!o.out.has_filename()) o.out = o.out.parent_path();  // "DIR/" is DIR
  if (o.out == o.out.root_path()) throw UsageError("--out must name a directory to create, not " + o.out.string());
}

ExportOptions parse_export_options(const po::variables_map& vm) {
  ExportOptions o;
  parse_format_and_out(vm, o);
  if (vm.count("shards")) {
    o.shards = vm["shards"].as<int64_t>();
    if (o.shards < 1) throw UsageError("--shards must be at least 1");
    if (o.format != "tfrecord") throw UsageError("--shards applies to --format tfrecord only");
  }
  if (vm.count("image-format")) {
    o.image_format = vm["image-format"].as<std::string>();
    if (o.image_format != "jpeg" && o.image_format != "png") {
      throw UsageError("unknown --image-format '" + o.image_format + "' (known: jpeg, png)");
    }
    if (o.format != "tfrecord") throw UsageError("--image-format applies to --format tfrecord; use --format jpeg|png");
  }
  if (vm.count("compression")) {
    if (o.format != "tfrecord") throw UsageError("--compression applies to --format tfrecord only");
    o.compression = parse_tfrecord_compression(vm["compression"].as<std::string>());
  }
  if (vm.count("quality")) {
    o.quality = vm["quality"].as<int>();
    if (o.quality < 1 || o.quality > 100) throw UsageError("--quality must be in 1..100");
  }
  if (vm.count("split")) {
    const std::string s = vm["split"].as<std::string>();
    if (s == "all") {
      o.splits = {"train", "test"};
    } else if (s == "train" || s == "test") {
      o.splits = {s};
    } else {
      throw UsageError("unknown --split '" + s + "' (known: train, test, all)");
    }
  }
  if (vm.count("data-dir")) o.data_dir = vm["data-dir"].as<std::string>();
  o.overwrite = vm["overwrite"].as<bool>();
  return o;
}

// The empty temporary directory, beside o.out, that the export is built in.
fs::path make_staging_directory(const ExportOptions& o) {
  if (fs::exists(o.out) && !(fs::is_directory(o.out) && fs::is_empty(o.out)) && !o.overwrite) {
    throw UsageError(o.out.string() + " already exists and is not empty; pass --overwrite to replace it");
  }
  const fs::path parent = fs::absolute(o.out).parent_path();
  fs::create_directories(parent);
  const fs::path tmp = parent / (o.out.filename().string() + ".partial-" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  return tmp;
}

// Removes the staging directory `p` unless `keep` is set once the export is in place.
struct RemoveOnError {
  fs::path p;
  bool keep = false;
  ~RemoveOnError() {
    std::error_code ec;
    if (!keep) fs::remove_all(p, ec);
  }
};

// Writes every split into `dir`, with dataset_info.json; returns what that file says.
nlohmann::json write_export(const ExportOptions& o, const fs::path& dir) {
  nlohmann::json info = {{"format", o.format},
                         {"source", "fashion_mnist"},
                         {"image_shape", {28, 28, 1}},
                         {"class_names", fashion_mnist_class_dirs()},
                         {"splits", nlohmann::json::object()}};
  if (o.format == "tfrecord") {
    info["image_format"] = o.image_format;
    info["compression"] = tfrecord_compression_name(o.compression);
    info["features"] = {{"image", "bytes: encoded " + o.image_format}, {"label", "int64: class id 0..9"}};
  }
  for (const std::string& split : o.splits) {
    const RawFashionMnist raw = load_fashion_mnist_raw(split, o.data_dir);
    RawSplit data{raw.n, raw.images.data(), raw.labels.data()};
    info["splits"][split] = o.format == "tfrecord" ? export_tfrecords(o, split, data, dir)
                                                   : export_images(o, split, data, dir);
  }
  std::ofstream f(dir / "dataset_info.json");
  f << info.dump(2) << "\n";
  f.close();
  if (!f) throw DataError("cannot write " + (dir / "dataset_info.json").string());
  return info;
}

// Everything is written: move it into place atomically. Without --overwrite the rename refuses a
// directory that appeared meanwhile (another export); with it, the two directories are exchanged in
// one step, so DIR always holds either the old or the new export, and the old one is removed after.
void move_into_place(const ExportOptions& o, const fs::path& tmp) {
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, o.out.c_str(), RENAME_NOREPLACE) == 0) return;
  const int error = errno;
  const bool occupied = error == EEXIST || error == ENOTEMPTY;
  if (occupied && fs::is_directory(o.out) && fs::is_empty(o.out)) {
    fs::remove(o.out);  // an empty directory (checked above) is not replaced, just used
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, o.out.c_str(), RENAME_NOREPLACE) != 0) {
      throw DataError("cannot move the export into " + o.out.string() + ": " + std::strerror(errno));
    }
  } else if (occupied && o.overwrite) {
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, o.out.c_str(), RENAME_EXCHANGE) != 0) {
      throw DataError("cannot replace " + o.out.string() + ": " + std::strerror(errno));
    }
    std::error_code ec;  // tmp now holds the old export
    fs::remove_all(tmp, ec);
    if (ec) std::fprintf(stderr, "keel data export: warning: could not remove the old export, now at %s: %s\n",
                         tmp.c_str(), ec.message().c_str());
  } else if (occupied) {
    throw UsageError(o.out.string() + " appeared while exporting; pass --overwrite to replace it");
  } else {
    throw DataError("cannot move the export into " + o.out.string() + ": " + std::strerror(error));
  }
}

int export_command(const std::vector<std::string>& args) {
  po::options_description d(
      "Usage: keel data export --format tfrecord|jpeg|png --out DIR [options]\n\n"
      "Writes Fashion-MNIST as TFRecord files of tf.train.Examples (image = encoded JPEG/PNG bytes, label =\n"
      "int64) or as a folder per split with one sub-folder per class, for `--dataset tfrecord:DIR` and\n"
      "`--dataset images:DIR`.");
  add_export_options(d);
  po::variables_map vm = parse_args(args, d);
  if (vm.count("help")) {
    std::cout << d << "\n";
    return kExitOk;
  }
  const ExportOptions o = parse_export_options(vm);
  const fs::path tmp = make_staging_directory(o);
  RemoveOnError cleanup{tmp};
  nlohmann::json info = write_export(o, tmp);
  move_into_place(o, tmp);
  cleanup.keep = true;
  std::uintmax_t bytes = 0;
  for (const auto& e : fs::recursive_directory_iterator(o.out)) {
    if (e.is_regular_file()) bytes += e.file_size();
  }
  int64_t total = 0;
  for (const auto& [split, written] : info["splits"].items()) total += written["examples"].get<int64_t>();
  if (vm["json"].as<bool>()) {
    // dataset_info.json's fields, and where the export is, how many examples and bytes it holds.
    info["out"] = o.out.string();
    info["examples"] = total;
    info["bytes"] = static_cast<int64_t>(bytes);
    std::cout << info.dump() << "\n";
    return kExitOk;
  }
  std::printf("Exported %lld Fashion-MNIST examples as %s%s to %s (%s)\n", static_cast<long long>(total),
              o.format.c_str(), o.format == "tfrecord" ? (" of " + o.image_format + " images").c_str() : "",
              o.out.string().c_str(), format_bytes(static_cast<int64_t>(bytes)).c_str());
  return kExitOk;
}

}  // namespace

int data_command(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << "Usage: keel data export --format tfrecord|jpeg|png --out DIR [options]   (keel data export --help)\n";
    return args.empty() ? kExitUsage : kExitOk;
  }
  if (args[0] == "export") return export_command(std::vector<std::string>(args.begin() + 1, args.end()));
  throw UsageError("unknown `keel data` command '" + args[0] + "' (known: export)");
}

}  // namespace keel::cli
