// The datasets `keel train` and `keel evaluate` read (`--dataset`, a contract):
//   fashion_mnist   the IDX files of Debian's dataset-fashion-mnist (in memory)
//   tfrecord:DIR    DIR/<split>-*.tfrecord[.gz]: tf.train.Examples with image = encoded JPEG/PNG bytes
//                   and label = int64 class id (what `keel data export --format tfrecord` writes)
//   images:DIR      DIR/<split>/<class>/*.{jpg,jpeg,png} (or DIR/<class>/... if DIR has no <split>
//                   folder), labels by sorted class folder name, as image_dataset_from_directory
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "framework/data/dataset.h"
#include "datasets/tfrecord.h"
#include "framework/core/shape.h"
#include "framework/device/input_context.h"

namespace keel::cli {

struct DatasetSource {
  enum class Kind { kFashionMnist, kTFRecord, kImages };
  Kind kind = Kind::kFashionMnist;
  std::string dir;  // tfrecord/images
};

// Parses and checks --dataset; a UsageError names the known forms.
DatasetSource parse_dataset_source(const std::string& text);

// "train-00001-of-00004.tfrecord" (".tfrecord.gz" for GZIP).
std::string tfrecord_shard_name(const std::string& split, int64_t shard, int64_t shards,
                                TFRecordCompression compression);
// Fashion-MNIST's class folders for image exports, by label id: "0_tshirt_top", ..., "9_ankle_boot" (sorted
// order is label order).
const std::vector<std::string>& fashion_mnist_class_dirs();

struct ExampleOptions {
  Shape input;             // the model's input: (H, W, C) for images, (N) for flat models
  int64_t classes = 10;
  bool one_hot = true;     // labels as one-hot vectors (categorical losses) or class ids
  bool training = true;    // shuffled files and records, interleaved; else in file order
  uint64_t seed = 1;
  int64_t shuffle_buffer = 60000;
  bool skip_corrupt = false;
  std::shared_ptr<std::atomic<int64_t>> skipped;  // counts skipped records/images when skip_corrupt
  // Per-host decoding (keel train under mpirun): the elements this process's rows of each global
  // batch need are decoded; the others become zeros of the same shapes, which nothing reads. Not with
  // skip_corrupt, where which element lands in which row depends on every element before it.
  InputContext input_context;
  // false: the decode map of runs saved before keel decoded per host (unkeyed: describe() "map"), so
  // that such a run's saved iterator state still restores; every element is decoded then.
  bool keyed_decode = true;
};

// The number of examples in `split` of a tfrecord:/images: source, or -1 if unknown: the image files
// counted, or the count `keel data export` wrote into DIR/dataset_info.json for TFRecords.
int64_t file_examples_count(const DatasetSource& source, const std::string& split);

// One encoded image (JPEG or PNG bytes, whatever they are) as the model's input (H, W, C) or (N):
// decoded (decode_image), scaled to [0, 1], resized bilinearly with half-pixel centres — the step
// every file pipeline runs, and `keel predict`. DataError naming `where` (the file or record) for a
// damaged image; UsageError when the image cannot fit a flat model's input.
Tensor image_for_input(const std::string& bytes, const std::string& where, const Shape& input);

// The class names of a run's dataset, by label id: Fashion-MNIST's are Keras's ("T-shirt/top",
// "Trouser", ...), also for a TFRecord export of it (its dataset_info.json says so); an image folder's
// are its class folders' names (sorted, as image_dataset_from_directory labels them); another TFRecord
// set's are its dataset_info.json's "class_names". Empty when unknown (no such file).
std::vector<std::string> dataset_class_names(const DatasetSource& source);
// Keras's names of Fashion-MNIST's classes (keras.datasets.fashion_mnist), by label id.
const std::vector<std::string>& fashion_mnist_class_names();

// Unbatched (image, label) elements of `split` from a tfrecord:/images: source: images decoded
// (decode_image), resized to the model's input (bilinear, half-pixel centres) and scaled to [0, 1].
Dataset file_examples(const DatasetSource& source, const std::string& split, const ExampleOptions& options);

}  // namespace keel::cli
