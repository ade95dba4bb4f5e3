// The datasets of a run (tools/cli/run_config.h): training (with its validation split and
// augmentation), validation and evaluation pipelines built from a RunConfig.
#include "tools/cli/run_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "datasets/fashion_mnist.h"
#include "datasets/image_ops.h"
#include "datasets/preprocessing.h"
#include "framework/core/limits.h"
#include "framework/core/random.h"
#include "framework/device/context.h"
#include "framework/train/losses.h"
#include "models/zoo.h"
#include "tools/cli/data_sources.h"

namespace keel::cli {

namespace {

// Images and labels (class ids) as slices; a categorical loss gets its one-hot labels per batch
// (adapted), never for the whole set, which would be 60000 x classes floats on the host.
Dataset labeled_slices(const RunConfig& config, const std::string& split) {
  LabeledImages data = load_fashion_mnist(split, config.data_dir);
  HostScope host;
  const int64_t n = data.images.dim(0);
  const Shape input = model_input(config);
  Tensor x = data.images;  // (N, 28, 28)
  if (input.size() == 1) {
    if (input[0] != 28 * 28) {
      throw UsageError("model input " + shape_string(input) + " does not fit Fashion-MNIST's 28x28 images; use --input-shape 784");
    }
    x = x.reshape({n, 784});
  } else if (input.size() != 3) {
    throw UsageError("--input-shape must be N (flat) or HxWxC for images, got " + shape_string(input));
  }
  if (!label_shape(config).empty() && config.classes < 10) {
    throw UsageError("Fashion-MNIST has 10 classes; --classes must be at least 10");
  }
  return Dataset::from_tensor_slices({x, data.labels});
}

// A batch of class ids (batch,) as one-hot rows (batch, classes); load_fashion_mnist checked the ids.
Tensor one_hot(const Tensor& ids, int64_t classes) {
  HostScope host;
  const int64_t n = ids.dim(0);
  Tensor y = Tensor::zeros({n, classes});
  for (int64_t i = 0; i < n; ++i) y.data()[i * classes + static_cast<int64_t>(ids.data()[i])] = 1.0f;
  return y;
}

// adapt_images of rows [input.first_row, input.end_row) of a batch; the other rows zeros.
Tensor adapt_rows(const Tensor& batch, const Shape& shape, const InputContext& input) {
  if (input.feeds_everything() || input.global_batch != batch.dim(0)) return adapt_images(batch, shape);
  HostScope host;
  const Tensor mine = adapt_images(batch.slice_rows(input.first_row, input.end_row), shape);
  Shape out_shape = mine.shape();
  out_shape[0] = batch.dim(0);
  Tensor out = Tensor::zeros(out_shape);
  const int64_t row = mine.size() / std::max<int64_t>(mine.dim(0), 1);
  std::copy_n(mine.data(), mine.size(), out.data() + input.first_row * row);
  return out;
}

// Per batch, in the pipeline (so on the prefetch thread), never the whole set at once: image models
// get each batch resized to their input (bilinear, half-pixel centres) with the gray channel repeated
// to C — this process's rows only (the others stay zeros: per-host input); a categorical loss gets
// one-hot labels.
Dataset adapted(const RunConfig& config, Dataset batched, const InputContext& input = {}) {
  const Shape input_shape = model_input(config);
  const bool images = input_shape.size() == 3;
  const int64_t classes = label_shape(config).empty() ? 0 : config.classes;
  if (!images && classes == 0) return batched;
  return batched.map([input_shape, images, classes, input](const Element& e) {
    return Element{images ? adapt_rows(e[0], input_shape, input) : e[0], classes > 0 ? one_hot(e[1], classes) : e[1]};
  });
}

// The training split must hold at least one global batch (batches drop their remainder): refused
// before step 0, with both sizes. `examples` < 0: unknown (checked when an epoch ends instead).
void check_enough_examples(const RunConfig& config, int64_t examples) {
  if (examples < 0 || examples >= config.global_batch()) return;
  throw UsageError("the training data holds " + std::to_string(examples) + " examples, fewer than one global batch of " +
                   std::to_string(config.global_batch()) + " (" + std::to_string(config.batch_per_core) + " per core x " +
                   std::to_string(config.device.cores) + " cores); use a smaller --batch-per-core or more data");
}

// --augment: each training example through the augmentation, after the shuffle and before batching,
// on the pipeline's map threads (outside any replica), keyed by (seed, epoch, index in the epoch).
// Fashion-MNIST's 28x28 images are first resized to the model's input, so that the steps' pixels
// are the model's; file sources already give that size. Examples outside this process's rows
// (per-host input) become zeros of the model's input shape instead.
Dataset augmented(const RunConfig& config, const Dataset& examples, const InputContext& input = {}) {
  if (config.augment.empty()) return examples;
  const Shape input_shape = model_input(config);
  const uint64_t seed = combine_keys(config.seed, 0x6175676d656e74ull);  // "augment": a stream of its own
  const preprocessing::Augmentation augmentation = preprocessing::Augmentation::parse(config.augment, input_shape, seed);
  // Zeros shaped as the augmented example: file sources decode to the input's channels; Fashion-MNIST
  // stays gray here (adapted() repeats the channel per batch).
  HostScope host;
  const Tensor placeholder = Tensor::zeros(input_shape);
  const Tensor gray_placeholder = Tensor::zeros({input_shape[0], input_shape[1], 1});
  return examples.map_with_key(
      [augmentation, input_shape, input, placeholder, gray_placeholder](const Element& e, const ElementKey& key) {
        if (!input.feeds(key.index)) {
          const bool gray = e[0].rank() == 2 || e[0].dim(2) == 1;
          return Element{gray ? gray_placeholder : placeholder, e[1]};
        }
        Element example = e;
        Tensor& x = example[0];
        if (x.rank() == 2) x = x.reshape({x.dim(0), x.dim(1), 1});  // Fashion-MNIST: (28, 28) gray
        if (x.dim(0) != input_shape[0] || x.dim(1) != input_shape[1]) x = resize(x, input_shape[0], input_shape[1]);
        return augmentation(example, key);
      },
      AUTOTUNE);
}

ExampleOptions example_options(const RunConfig& config, bool training) {
  ExampleOptions o;
  o.input = model_input(config);
  o.classes = config.classes;
  o.one_hot = !label_shape(config).empty();
  o.training = training;
  o.seed = config.seed;
  o.shuffle_buffer = config.shuffle_buffer;
  o.skip_corrupt = config.skip_corrupt;
  o.skipped = skipped_records();
  return o;
}

}  // namespace

std::shared_ptr<std::atomic<int64_t>> skipped_records() {
  static const auto counter = std::make_shared<std::atomic<int64_t>>(0);
  return counter;
}

namespace {

// Keras's validation_split: the first int(n * (1 - split)) examples train; the rest validate.
int64_t split_at(const Dataset& slices, double validation_split) {
  return static_cast<int64_t>(static_cast<double>(slices.cardinality()) * (1.0 - validation_split));
}

Dataset training_slices(const RunConfig& config) {
  Dataset slices = labeled_slices(config, "train");
  return config.validation_split > 0.0 ? slices.take(split_at(slices, config.validation_split)) : slices;
}

}  // namespace

std::optional<Dataset> validation_dataset(const RunConfig& config) {
  if (!config.validation_data.empty()) return evaluation_dataset(config, config.validation_data);
  if (config.validation_split <= 0.0) return std::nullopt;
  if (parse_dataset_source(config.dataset).kind != DatasetSource::Kind::kFashionMnist) {
    throw UsageError("--validation-split takes the last examples of Fashion-MNIST's arrays; for " + config.dataset +
                     " use --validation-data test");
  }
  Dataset slices = labeled_slices(config, "train");
  return adapted(config, slices.skip(split_at(slices, config.validation_split))
                             .batch(config.global_batch(), /*drop_remainder=*/false))
      .prefetch(AUTOTUNE);
}

Dataset training_dataset(const RunConfig& config, const TrainingInput& share) {
  const DatasetSource source = parse_dataset_source(config.dataset);
  const InputContext& input = share.input_context;
  if (source.kind != DatasetSource::Kind::kFashionMnist) {
    if (config.validation_split > 0.0) validation_dataset(config);  // the message above
    check_enough_examples(config, file_examples_count(source, "train"));
    ExampleOptions options = example_options(config, /*training=*/true);
    options.input_context = input;
    options.keyed_decode = share.keyed_decode;
    return augmented(config, file_examples(source, "train", options), input)
        .batch(config.global_batch(), /*drop_remainder=*/true)
        .prefetch(AUTOTUNE);
  }
  const Dataset slices = training_slices(config);
  check_enough_examples(config, slices.cardinality());
  return adapted(config,
                 augmented(config, slices.shuffle(config.shuffle_buffer, config.seed), input)
                     .batch(config.global_batch(), /*drop_remainder=*/true),
                 input)
      .prefetch(AUTOTUNE);
}

Dataset evaluation_dataset(const RunConfig& config, const std::string& split) {
  const DatasetSource source = parse_dataset_source(config.dataset);
  if (source.kind != DatasetSource::Kind::kFashionMnist) {
    return file_examples(source, split, example_options(config, /*training=*/false))
        .batch(config.global_batch(), /*drop_remainder=*/false)
        .prefetch(AUTOTUNE);
  }
  return adapted(config, labeled_slices(config, split).batch(config.global_batch(), /*drop_remainder=*/false))
      .prefetch(AUTOTUNE);
}

}  // namespace keel::cli
