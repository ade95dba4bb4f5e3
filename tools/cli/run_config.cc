#include "tools/cli/run_config.h"

#include <filesystem>
#include <sstream>

#include "datasets/fashion_mnist.h"
#include "datasets/image_ops.h"
#include "tools/cli/data_sources.h"
#include "framework/device/context.h"
#include "framework/train/losses.h"
#include "framework/train/optimizers.h"
#include "models/zoo.h"

namespace keel::cli {

nlohmann::json RunConfig::to_json() const {
  return {{"model", model},
          {"dataset", dataset},
          {"data_dir", data_dir},
          {"device", {{"name", device.name}, {"cores", device.cores}, {"hbm_bytes_per_core", device.hbm_bytes_per_core}}},
          {"batch_per_core", batch_per_core},
          {"epochs", epochs},
          {"optimizer", optimizer},
          {"learning_rate", learning_rate},
          {"lr_schedule", lr_schedule},
          {"decay_steps", decay_steps},
          {"momentum", momentum},
          {"nesterov", nesterov},
          {"loss", loss},
          {"seed", seed},
          {"shuffle_buffer", shuffle_buffer},
          {"input_shape", input_shape},
          {"classes", classes},
          {"keep", keep},
          {"save_every_steps", save_every_steps},
          {"skip_corrupt", skip_corrupt},
          {"include_top", include_top},
          {"pooling", pooling},
          {"freeze", freeze},
          {"init_weights", init_weights},
          {"init_by_name", init_by_name},
          {"init_skip_mismatch", init_skip_mismatch},
          {"validation_split", validation_split},
          {"validation_data", validation_data},
          {"validation_freq", validation_freq},
          {"early_stopping_patience", early_stopping_patience},
          {"early_stopping_monitor", early_stopping_monitor},
          {"restore_best_weights", restore_best_weights},
          {"reduce_lr_patience", reduce_lr_patience},
          {"reduce_lr_factor", reduce_lr_factor}};
}

RunConfig RunConfig::from_json(const nlohmann::json& j) {
  RunConfig c;
  c.model = j.at("model").get<std::string>();
  c.dataset = j.at("dataset").get<std::string>();
  c.data_dir = j.at("data_dir").get<std::string>();
  const auto& d = j.at("device");
  c.device = DeviceSpec{d.at("name").get<std::string>(), d.at("cores").get<int>(), d.at("hbm_bytes_per_core").get<int64_t>()};
  c.batch_per_core = j.at("batch_per_core").get<int64_t>();
  c.epochs = j.at("epochs").get<int>();
  c.optimizer = j.at("optimizer").get<std::string>();
  c.learning_rate = j.at("learning_rate").get<float>();
  c.lr_schedule = j.value("lr_schedule", std::string("constant"));
  c.decay_steps = j.value("decay_steps", int64_t{0});
  c.momentum = j.at("momentum").get<float>();
  c.nesterov = j.at("nesterov").get<bool>();
  c.loss = j.at("loss").get<std::string>();
  c.seed = j.at("seed").get<uint64_t>();
  c.shuffle_buffer = j.at("shuffle_buffer").get<int64_t>();
  c.input_shape = j.at("input_shape").get<Shape>();
  c.classes = j.at("classes").get<int64_t>();
  c.keep = j.at("keep").get<int>();
  c.save_every_steps = j.at("save_every_steps").get<int64_t>();
  c.skip_corrupt = j.value("skip_corrupt", false);
  c.include_top = j.value("include_top", true);
  c.pooling = j.value("pooling", std::string());
  c.freeze = j.value("freeze", std::string());
  c.init_weights = j.value("init_weights", std::string());
  c.init_by_name = j.value("init_by_name", false);
  c.init_skip_mismatch = j.value("init_skip_mismatch", false);
  c.validation_split = j.value("validation_split", 0.0);
  c.validation_data = j.value("validation_data", std::string());
  c.validation_freq = j.value("validation_freq", 1);
  c.early_stopping_patience = j.value("early_stopping_patience", -1);
  c.early_stopping_monitor = j.value("early_stopping_monitor", std::string("val_loss"));
  c.restore_best_weights = j.value("restore_best_weights", false);
  c.reduce_lr_patience = j.value("reduce_lr_patience", -1);
  c.reduce_lr_factor = j.value("reduce_lr_factor", 0.1);
  return c;
}

void add_model_options(po::options_description& d) {
  d.add_options()
      ("model", po::value<std::string>(), "model from the zoo (see `keel models`); default mlp")
      ("input-shape", po::value<std::string>(), "input shape HxWxC or N (default: the model's)")
      ("classes", po::value<int64_t>(), "number of classes (default 10)")
      ("optimizer", po::value<std::string>(), "adam | sgd (default adam)")
      ("lr", po::value<float>(), "learning rate (default: Keras's, 0.001 for Adam, 0.01 for SGD)")
      ("lr-schedule", po::value<std::string>(), "constant | cosine (Keras's CosineDecay from --lr to 0 over the run)")
      ("momentum", po::value<float>(), "SGD momentum (default 0)")
      ("nesterov", po::bool_switch(), "SGD with Nesterov momentum")
      ("loss", po::value<std::string>(), "categorical_crossentropy | sparse_categorical_crossentropy");
}

void add_device_options(po::options_description& d) {
  d.add_options()
      ("device", po::value<std::string>(), "device preset: cpu, v2-8, v3-8, v4-8, v5e-8, v5p-8, v6e-8 (default v3-8)")
      ("cores", po::value<int>(), "custom device: number of cores")
      ("hbm-per-core", po::value<std::string>(), "custom device: HBM per core, e.g. 512MiB, 16GiB")
      ("batch-per-core", po::value<int64_t>(), "per-core batch; the global batch is this times the cores (default 16)");
}

void add_training_options(po::options_description& d) {
  d.add_options()
      ("dataset", po::value<std::string>(), "fashion_mnist (default), tfrecord:DIR or images:DIR (see `keel data export`)")
      ("skip-corrupt", po::bool_switch(), "tfrecord:/images: skip (and count) corrupt records and images instead of stopping")
      ("data-dir", po::value<std::string>(), "directory of the dataset files (default /usr/share/datasets/fashion-mnist)")
      ("epochs", po::value<int>(), "total number of epochs (default 10)")
      ("seed", po::value<uint64_t>(), "random seed for weights, shuffling and dropout (default 1)")
      ("shuffle-buffer", po::value<int64_t>(), "shuffle buffer size (default 60000: a full shuffle)")
      ("keep", po::value<int>(), "checkpoints to keep (default 3; 0 keeps all)")
      ("save-every-steps", po::value<int64_t>(), "also save every N steps (default: at epoch ends only)");
}

void apply_model_options(const po::variables_map& vm, RunConfig& c) {
  if (vm.count("model")) c.model = vm["model"].as<std::string>();
  zoo::find(c.model);  // unknown model: a clear message now
  if (vm.count("input-shape")) c.input_shape = parse_shape(vm["input-shape"].as<std::string>());
  if (vm.count("classes")) c.classes = vm["classes"].as<int64_t>();
  if (c.classes <= 0) throw UsageError("--classes must be positive, got " + std::to_string(c.classes));
  if (vm.count("optimizer")) c.optimizer = vm["optimizer"].as<std::string>();
  if (vm.count("lr")) c.learning_rate = vm["lr"].as<float>();
  if (vm.count("lr-schedule")) c.lr_schedule = vm["lr-schedule"].as<std::string>();
  if (c.lr_schedule != "constant" && c.lr_schedule != "cosine") {
    throw UsageError("--lr-schedule must be constant or cosine, got '" + c.lr_schedule + "'");
  }
  if (vm.count("momentum")) c.momentum = vm["momentum"].as<float>();
  if (vm.count("nesterov") && vm["nesterov"].as<bool>()) c.nesterov = true;
  if (vm.count("loss")) c.loss = vm["loss"].as<std::string>();
  make_optimizer(c.optimizer, c.learning_rate, c.momentum, c.nesterov);  // validates
  make_loss(c.loss);
  if (vm.count("lr") && !(c.learning_rate > 0)) throw UsageError("--lr must be positive");
}

void apply_device_options(const po::variables_map& vm, RunConfig& c) {
  const bool custom = vm.count("cores") || vm.count("hbm-per-core");
  if (custom && vm.count("device")) throw UsageError("give either --device or --cores/--hbm-per-core, not both");
  if (custom) {
    if (!vm.count("cores") || !vm.count("hbm-per-core")) {
      throw UsageError("a custom device needs both --cores N and --hbm-per-core SIZE");
    }
    c.device = DeviceSpec::custom(vm["cores"].as<int>(), parse_bytes(vm["hbm-per-core"].as<std::string>()));
  } else if (vm.count("device")) {
    c.device = DeviceSpec::preset(vm["device"].as<std::string>());
  }
  if (vm.count("batch-per-core")) c.batch_per_core = vm["batch-per-core"].as<int64_t>();
  if (c.batch_per_core <= 0) throw UsageError("--batch-per-core must be positive, got " + std::to_string(c.batch_per_core));
}

void apply_training_options(const po::variables_map& vm, RunConfig& c) {
  if (vm.count("dataset")) c.dataset = vm["dataset"].as<std::string>();
  // A clear message now for an unknown form or a missing directory. The directory is saved absolute, so
  // that `keel resume` and `keel evaluate` find it from any working directory.
  if (const DatasetSource source = parse_dataset_source(c.dataset); source.kind != DatasetSource::Kind::kFashionMnist) {
    const std::string prefix = c.dataset.substr(0, c.dataset.find(':') + 1);
    c.dataset = prefix + std::filesystem::absolute(source.dir).lexically_normal().string();
  }
  if (vm.count("skip-corrupt") && vm["skip-corrupt"].as<bool>()) c.skip_corrupt = true;
  if (vm.count("data-dir")) c.data_dir = vm["data-dir"].as<std::string>();
  if (vm.count("epochs")) c.epochs = vm["epochs"].as<int>();
  if (c.epochs <= 0) throw UsageError("--epochs must be positive, got " + std::to_string(c.epochs));
  if (vm.count("seed")) c.seed = vm["seed"].as<uint64_t>();
  if (vm.count("shuffle-buffer")) c.shuffle_buffer = vm["shuffle-buffer"].as<int64_t>();
  if (c.shuffle_buffer <= 0) throw UsageError("--shuffle-buffer must be positive");
  if (vm.count("keep")) c.keep = vm["keep"].as<int>();
  if (vm.count("save-every-steps")) c.save_every_steps = vm["save-every-steps"].as<int64_t>();
  if (c.save_every_steps < 0) throw UsageError("--save-every-steps must not be negative");
}

po::variables_map parse_args(const std::vector<std::string>& args, const po::options_description& options,
                             const po::positional_options_description* positional) {
  po::command_line_parser parser(args);
  parser.options(options);
  if (positional) parser.positional(*positional);
  po::parsed_options parsed = parser.run();
  for (const po::option& o : parsed.options) {
    if (o.position_key >= 0 && (!positional || o.string_key.empty())) {
      throw UsageError("unexpected argument '" + (o.original_tokens.empty() ? std::string() : o.original_tokens[0]) + "'");
    }
  }
  po::variables_map vm;
  po::store(parsed, vm);
  po::notify(vm);
  return vm;
}

Shape parse_shape(const std::string& text) {
  Shape shape;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, 'x')) {
    try {
      size_t used = 0;
      const long long v = std::stoll(part, &used);
      if (used != part.size() || v <= 0) throw std::invalid_argument(part);
      shape.push_back(v);
    } catch (const std::exception&) {
      throw UsageError("bad shape '" + text + "': expected positive sizes like 224x224x3 or 784");
    }
  }
  if (shape.empty()) throw UsageError("bad shape '" + text + "': expected positive sizes like 224x224x3 or 784");
  return shape;
}

std::unique_ptr<Model> build_model(const RunConfig& config) {
  zoo::ModelOptions options;
  options.input_shape = config.input_shape;
  options.classes = config.classes;
  options.include_top = config.include_top;
  options.pooling = config.pooling;
  std::unique_ptr<Model> model = zoo::build(config.model, options);
  freeze_layers(config, *model);
  std::shared_ptr<Optimizer> optimizer = make_optimizer(config.optimizer, config.learning_rate, config.momentum, config.nesterov);
  // Training always knows its decay steps (run() sets them); planning and summaries do not need them.
  if (config.lr_schedule == "cosine" && config.decay_steps > 0) {
    optimizer->set_schedule(std::make_shared<CosineDecay>(optimizer->learning_rate(), config.decay_steps));
  }
  model->compile(optimizer, make_loss(config.loss));
  return model;
}

ModelFactory model_factory(const RunConfig& config) {
  return [config] { return build_model(config); };
}

Shape label_shape(const RunConfig& config) {
  if (make_loss(config.loss)->sparse_labels()) return {};
  return {config.classes};
}

namespace {

Shape model_input(const RunConfig& config) {
  return config.input_shape.empty() ? zoo::find(config.model).default_input_shape : config.input_shape;
}

// Images and labels as slices; labels one-hot for a categorical loss (as the seed does).
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
  Tensor y = data.labels;
  if (!label_shape(config).empty()) {
    if (config.classes < 10) throw UsageError("Fashion-MNIST has 10 classes; --classes must be at least 10");
    y = Tensor::zeros({n, config.classes});
    const float* ids = data.labels.data();
    for (int64_t i = 0; i < n; ++i) y.data()[i * config.classes + static_cast<int64_t>(ids[i])] = 1.0f;
  }
  return Dataset::from_tensor_slices({x, y});
}

// Image models get each batch resized to their input (bilinear, half-pixel centres) and the gray
// channel repeated to C, in the pipeline (so on the prefetch thread), never the whole set at once.
Dataset adapted(const RunConfig& config, Dataset batched) {
  const Shape input = model_input(config);
  if (input.size() != 3) return batched;
  return batched.map([input](const Element& e) { return Element{adapt_images(e[0], input), e[1]}; });
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

Dataset training_dataset(const RunConfig& config) {
  const DatasetSource source = parse_dataset_source(config.dataset);
  if (source.kind != DatasetSource::Kind::kFashionMnist) {
    if (config.validation_split > 0.0) validation_dataset(config);  // the message above
    return file_examples(source, "train", example_options(config, /*training=*/true))
        .batch(config.global_batch(), /*drop_remainder=*/true)
        .prefetch(AUTOTUNE);
  }
  return adapted(config, training_slices(config)
                             .shuffle(config.shuffle_buffer, config.seed)
                             .batch(config.global_batch(), /*drop_remainder=*/true))
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
