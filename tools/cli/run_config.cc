#include "tools/cli/run_config.h"

#include <cmath>
#include <filesystem>

#include "datasets/preprocessing.h"
#include "framework/core/host_threads.h"
#include "framework/core/limits.h"
#include "framework/ops/conv.h"
#include "framework/train/losses.h"
#include "framework/train/optimizers.h"
#include "models/zoo.h"
#include "tools/cli/data_sources.h"

namespace keel::cli {

namespace {
constexpr size_t kMaxLayoutEntries = 64;
}  // namespace

nlohmann::json RunConfig::to_json() const {
  return {{"model", model},
          {"dataset", dataset},
          {"data_dir", data_dir},
          {"device",
           {{"name", device.name}, {"cores", device.cores}, {"hbm_bytes_per_core", device.hbm_bytes_per_core},
            {"hosts", device.hosts}}},
          {"shard", sharding_mode_name(shard)},
          {"remat", remat_name(remat)},
          {"precision", precision},
          {"layout", layout},
          {"batch_per_core", batch_per_core},
          {"epochs", epochs},
          {"optimizer", optimizer},
          {"learning_rate", learning_rate},
          {"lr_schedule", lr_schedule},
          {"decay_steps", decay_steps},
          {"momentum", momentum},
          {"nesterov", nesterov},
          {"weight_decay", weight_decay},
          {"loss", loss},
          {"label_smoothing", label_smoothing},
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
          {"reduce_lr_factor", reduce_lr_factor},
          {"augment", augment},
          {"metrics", metrics},
          {"save_best_only", save_best_only},
          {"checkpoint_monitor", checkpoint_monitor},
          {"tensorboard", tensorboard}};
}

namespace {

using nlohmann::json;

// Strict readers of a stored run configuration: the field must be there, of the right JSON type, and
// an integer must fit int64 (nlohmann's get<> would convert a float or wrap an unsigned silently).
const json& field(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end()) throw std::invalid_argument(std::string("it has no \"") + key + "\"");
  return *it;
}

[[noreturn]] void wrong_type(const char* key, const char* expected, const json& v) {
  throw std::invalid_argument(std::string("\"") + key + "\" must be " + expected + ", got a JSON " + v.type_name());
}

int64_t int_value(const char* key, const json& v) {
  if (!v.is_number_integer()) wrong_type(key, "an integer", v);
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    throw std::invalid_argument(std::string("\"") + key + "\" is past 2^63");
  }
  return v.get<int64_t>();
}

int64_t int_field(const json& j, const char* key) { return int_value(key, field(j, key)); }

// An int-typed field, range-checked before it is narrowed.
int narrow_field(const json& j, const char* key, int64_t lo, int64_t hi) {
  return static_cast<int>(check_in_range(key, int_field(j, key), lo, hi));
}

float float_field(const json& j, const char* key) {
  const json& v = field(j, key);
  if (!v.is_number()) wrong_type(key, "a number", v);
  const double d = v.get<double>();
  if (!std::isfinite(d) || std::fabs(d) > 3.0e38) throw std::invalid_argument(std::string("\"") + key + "\" must be a finite float");
  return static_cast<float>(d);
}

double double_field(const json& j, const char* key) {
  const json& v = field(j, key);
  if (!v.is_number()) wrong_type(key, "a number", v);
  const double d = v.get<double>();
  if (!std::isfinite(d)) throw std::invalid_argument(std::string("\"") + key + "\" must be finite");
  return d;
}

std::string string_field(const json& j, const char* key, size_t max_bytes) {
  const json& v = field(j, key);
  if (!v.is_string()) wrong_type(key, "a string", v);
  const std::string& s = v.get_ref<const std::string&>();
  if (s.size() > max_bytes) {
    throw std::invalid_argument(std::string("\"") + key + "\" is " + std::to_string(s.size()) +
                                " bytes long, more than keel's limit of " + std::to_string(max_bytes));
  }
  return s;
}

bool bool_field(const json& j, const char* key) {
  const json& v = field(j, key);
  if (!v.is_boolean()) wrong_type(key, "true or false", v);
  return v.get<bool>();
}

constexpr size_t kMaxPathBytes = 4096;

DeviceSpec device_from_json(const json& d) {
  if (!d.is_object()) wrong_type("device", "an object", d);
  DeviceSpec spec{string_field(d, "name", kMaxNameBytes), narrow_field(d, "cores", 1, kMaxCores),
                  int_field(d, "hbm_bytes_per_core")};
  // Runs saved before pod slices have no "hosts": they ran on one host.
  if (d.contains("hosts")) spec.hosts = narrow_field(d, "hosts", 1, kMaxHosts);
  spec.validate();
  return spec;
}

Shape shape_from_json(const json& v) {
  if (!v.is_array() || v.size() > static_cast<size_t>(kMaxInputRank)) {
    throw std::invalid_argument("\"input_shape\" must be a list of at most " + std::to_string(kMaxInputRank) + " sizes");
  }
  Shape shape;
  for (const json& d : v) shape.push_back(int_value("input_shape", d));
  return shape;
}

}  // namespace

namespace {

// --layout: each entry parses, at most kMaxLayoutEntries, and what a LayoutMap runs with.
void check_layout(const RunConfig& c) {
  if (c.layout.empty()) return;
  if (c.layout.size() > kMaxLayoutEntries) {
    throw std::invalid_argument("at most " + std::to_string(kMaxLayoutEntries) + " --layout entries, got " + std::to_string(c.layout.size()));
  }
  distribution::LayoutMap::from_specs(c.layout);
  if (c.shard != ShardingMode::none) {
    throw std::invalid_argument(std::string("--layout places variables itself: it runs with --shard none, not ") +
                                sharding_mode_name(c.shard) + " (`--layout none` drops a resumed run's layout)");
  }
}

// Keras ignores a LayoutMap key that matches nothing; on the command line it is a typo to report.
void check_layout_matches(const RunConfig& config, const Model& model) {
  if (config.layout.empty()) return;
  std::vector<std::string> paths;
  for (Variable* v : model.variables()) paths.push_back(v->name());
  const std::vector<std::string> unmatched = distribution::LayoutMap::from_specs(config.layout).unmatched(paths);
  if (!unmatched.empty()) {
    throw UsageError("--layout '" + quote_untrusted(unmatched.front()) + "' matches no variable of " + config.model +
                     " (see `keel summary --model " + config.model + "` for its layers; variables are LAYER/kernel, LAYER/bias)");
  }
}

}  // namespace

RunConfig RunConfig::from_json(const nlohmann::json& j) {
  if (!j.is_object()) wrong_type("config", "an object", j);
  RunConfig c;
  c.model = string_field(j, "model", kMaxNameBytes);
  c.dataset = string_field(j, "dataset", kMaxPathBytes);
  c.data_dir = string_field(j, "data_dir", kMaxPathBytes);
  c.device = device_from_json(field(j, "device"));
  if (j.contains("shard")) c.shard = parse_sharding_mode(string_field(j, "shard", kMaxNameBytes));
  if (j.contains("remat")) c.remat = parse_remat(string_field(j, "remat", kMaxNameBytes));
  if (j.contains("precision")) c.precision = mixed_precision::Policy(string_field(j, "precision", kMaxNameBytes)).name();
  if (j.contains("layout")) {  // absent in runs from before keel had --layout: none
    const json& list = field(j, "layout");
    if (!list.is_array() || list.size() > kMaxLayoutEntries) wrong_type("layout", "a list of at most 64 PATTERN=AXES", list);
    for (const json& spec : list) {
      if (!spec.is_string() || spec.get_ref<const std::string&>().size() > kMaxPathBytes) wrong_type("layout", "a list of PATTERN=AXES", list);
      c.layout.push_back(spec.get<std::string>());
    }
  }
  c.batch_per_core = int_field(j, "batch_per_core");
  c.epochs = narrow_field(j, "epochs", 1, kMaxEpochs);
  c.optimizer = string_field(j, "optimizer", kMaxNameBytes);
  c.learning_rate = float_field(j, "learning_rate");
  if (j.contains("lr_schedule")) c.lr_schedule = string_field(j, "lr_schedule", kMaxNameBytes);
  if (j.contains("decay_steps")) c.decay_steps = int_field(j, "decay_steps");
  c.momentum = float_field(j, "momentum");
  c.nesterov = bool_field(j, "nesterov");
  if (j.contains("weight_decay")) c.weight_decay = float_field(j, "weight_decay");  // runs from before it: none
  if (j.contains("label_smoothing")) c.label_smoothing = float_field(j, "label_smoothing");  // idem
  c.loss = string_field(j, "loss", kMaxNameBytes);
  const json& seed = field(j, "seed");
  if (!seed.is_number_unsigned() && !(seed.is_number_integer() && seed.get<int64_t>() >= 0)) {
    wrong_type("seed", "a non-negative integer", seed);
  }
  c.seed = seed.get<uint64_t>();
  c.shuffle_buffer = int_field(j, "shuffle_buffer");
  c.input_shape = shape_from_json(field(j, "input_shape"));
  c.classes = int_field(j, "classes");
  c.keep = narrow_field(j, "keep", 0, kMaxKeep);
  c.save_every_steps = int_field(j, "save_every_steps");
  if (j.contains("skip_corrupt")) c.skip_corrupt = bool_field(j, "skip_corrupt");
  if (j.contains("include_top")) c.include_top = bool_field(j, "include_top");
  if (j.contains("pooling")) c.pooling = string_field(j, "pooling", kMaxNameBytes);
  if (j.contains("freeze")) c.freeze = string_field(j, "freeze", kMaxNameBytes);
  if (j.contains("init_weights")) c.init_weights = string_field(j, "init_weights", kMaxPathBytes);
  if (j.contains("init_by_name")) c.init_by_name = bool_field(j, "init_by_name");
  if (j.contains("init_skip_mismatch")) c.init_skip_mismatch = bool_field(j, "init_skip_mismatch");
  if (j.contains("validation_split")) c.validation_split = double_field(j, "validation_split");
  if (j.contains("validation_data")) c.validation_data = string_field(j, "validation_data", kMaxNameBytes);
  if (j.contains("validation_freq")) c.validation_freq = narrow_field(j, "validation_freq", 1, kMaxEpochs);
  if (j.contains("early_stopping_patience")) c.early_stopping_patience = narrow_field(j, "early_stopping_patience", -1, kMaxEpochs);
  if (j.contains("early_stopping_monitor")) c.early_stopping_monitor = string_field(j, "early_stopping_monitor", kMaxNameBytes);
  if (j.contains("restore_best_weights")) c.restore_best_weights = bool_field(j, "restore_best_weights");
  if (j.contains("reduce_lr_patience")) c.reduce_lr_patience = narrow_field(j, "reduce_lr_patience", -1, kMaxEpochs);
  if (j.contains("reduce_lr_factor")) c.reduce_lr_factor = double_field(j, "reduce_lr_factor");
  if (j.contains("augment")) c.augment = string_field(j, "augment", kMaxNameBytes);
  if (j.contains("metrics")) {  // absent in runs from before keel had --metrics: accuracy alone
    const json& list = field(j, "metrics");
    if (!list.is_array() || list.empty() || list.size() > 8) wrong_type("metrics", "a list of 1 to 8 metric names", list);
    c.metrics.clear();
    for (const json& name : list) {
      if (!name.is_string() || name.get_ref<const std::string&>().size() > kMaxNameBytes) {
        wrong_type("metrics", "a list of metric names", list);
      }
      c.metrics.push_back(name.get<std::string>());
    }
  }
  if (j.contains("save_best_only")) c.save_best_only = bool_field(j, "save_best_only");
  if (j.contains("checkpoint_monitor")) c.checkpoint_monitor = string_field(j, "checkpoint_monitor", kMaxNameBytes);
  if (j.contains("tensorboard")) c.tensorboard = bool_field(j, "tensorboard");
  c.validate();
  return c;
}

void RunConfig::validate() const {
  zoo::find(model);
  if (dataset != "fashion_mnist" && dataset.rfind("tfrecord:", 0) != 0 && dataset.rfind("images:", 0) != 0) {
    throw std::invalid_argument("unknown dataset '" + quote_untrusted(dataset) +
                                "' (known: fashion_mnist, tfrecord:DIR, images:DIR)");
  }
  device.validate();
  check_in_range("the per-core batch (--batch-per-core)", batch_per_core, 1, kMaxBatchPerCore);
  check_in_range("epochs (--epochs)", epochs, 1, kMaxEpochs);
  if (!(learning_rate == -1.0f || (std::isfinite(learning_rate) && learning_rate > 0.0f))) {
    throw std::invalid_argument("the learning rate (--lr) must be finite and positive, got " + std::to_string(learning_rate));
  }
  if (!(momentum >= 0.0f && momentum <= 1.0f)) {
    throw std::invalid_argument("--momentum must be in [0, 1], got " + std::to_string(momentum));
  }
  if (!(std::isfinite(weight_decay) && weight_decay >= 0.0f)) {
    throw std::invalid_argument("--weight-decay must be finite and non-negative, got " + std::to_string(weight_decay));
  }
  make_optimizer(optimizer, learning_rate, momentum, nesterov, weight_decay);
  if (metrics.empty() || metrics.front() != "accuracy") throw std::invalid_argument("the metrics must start with accuracy");
  if (!(label_smoothing >= 0.0f && label_smoothing <= 1.0f)) {
    throw std::invalid_argument("--label-smoothing must be in [0, 1], got " + std::to_string(label_smoothing));
  }
  const bool sparse_labels = make_loss(loss)->sparse_labels();
  if (label_smoothing != 0.0f && sparse_labels) {
    throw std::invalid_argument("--label-smoothing needs one-hot labels: use --loss categorical_crossentropy (Keras's "
                                "sparse_categorical_crossentropy has no label_smoothing)");
  }
  check_metrics(metrics, sparse_labels);
  if (lr_schedule != "constant" && lr_schedule != "cosine") {
    throw std::invalid_argument("--lr-schedule must be constant or cosine, got '" + quote_untrusted(lr_schedule) + "'");
  }
  check_in_range("the cosine schedule's decay steps", decay_steps, 0, kMaxSteps);
  check_in_range("--shuffle-buffer", shuffle_buffer, 1, kMaxShuffleBuffer);
  if (!input_shape.empty()) check_input_shape("the input shape (--input-shape)", input_shape);
  check_in_range("--classes", classes, 1, kMaxClasses);
  check_in_range("checkpoints kept (--keep)", keep, 0, kMaxKeep);
  check_in_range("--save-every-steps", save_every_steps, 0, kMaxSteps);
  checked_mul(batch_per_core, device.cores, "the global batch (per-core batch x cores)");
  check_layout(*this);
  if (augment.size() > kMaxNameBytes) {
    throw std::invalid_argument("--augment is " + std::to_string(augment.size()) + " bytes long, more than keel's limit of " +
                                std::to_string(kMaxNameBytes));
  }
  if (!augment.empty()) {
    const Shape input = model_input(*this);
    if (input.size() != 3) {
      throw std::invalid_argument("--augment needs an image model (input HxWxC); " + model + " takes " +
                                  shape_string(input) + " vectors (try --model resnet18 --input-shape 32x32x1)");
    }
    try {
      preprocessing::Augmentation::parse(augment, input, seed);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("--augment: ") + e.what());
    }
  }
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
      ("weight-decay", po::value<float>(), "Keras's weight_decay (decoupled, as AdamW): each step w -= w * F * lr before the update (default 0: none)")
      ("loss", po::value<std::string>(), "categorical_crossentropy | sparse_categorical_crossentropy")
      ("label-smoothing", po::value<float>(), "Keras's label_smoothing of categorical_crossentropy: one-hot labels become y (1 - F) + F / classes (default 0)");
}

namespace {

// --device's help: every preset, with its hosts where it has several.
std::string device_help() {
  std::string text = "device preset (default v3-8):";
  for (const std::string& name : DeviceSpec::preset_names()) {
    const DeviceSpec s = DeviceSpec::preset(name);
    text += " " + name + (s.hosts > 1 ? " (" + std::to_string(s.hosts) + "x" + std::to_string(s.cores_per_host()) + ")" : "");
    if (&name != &DeviceSpec::preset_names().back()) text += ",";
  }
  return text + "; pod slices (hosts x cores per host) run in one process";
}

}  // namespace

void add_device_options(po::options_description& d) {
  d.add_options()
      ("device", po::value<std::string>(), device_help().c_str())
      ("cores", po::value<int>(), "custom device: number of cores (the whole slice's)")
      ("hosts", po::value<int>(), "custom device: hosts of a pod slice (default 1; must divide --cores)")
      ("hbm-per-core", po::value<std::string>(), "custom device: HBM per core, e.g. 512MiB, 16GiB, or unbounded (no budget)")
      ("batch-per-core", po::value<int64_t>(), "per-core batch; the global batch is this times the cores (default 16)");
}

void add_host_options(po::options_description& d) {
  d.add_options()("threads", po::value<std::string>(),
                  "threads this process computes with: replicas, and the kernels of each replica when there are fewer "
                  "replicas than threads (default: KEEL_NUM_THREADS, else every hardware thread; under mpirun each "
                  "process's share; at most the CPUs the process may run on). Results are bit-identical with any number");
}

void apply_host_options(const po::variables_map& vm) {
  if (vm.count("threads")) set_host_threads(parse_thread_count(vm["threads"].as<std::string>(), "--threads"));
  (void)host_threads();        // a bad KEEL_NUM_THREADS: a usage error now
  (void)ops::conv_backend();   // the same for a bad KEEL_CONV_BACKEND
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
      ("save-every-steps", po::value<int64_t>(), "also save every N steps (default: at epoch ends only)")
      ("augment", po::value<std::string>(), "augment training images, e.g. flip,crop:4 (steps: flip[:MODE], crop:P, translate:F[:F], zoom:F[:F], erase[:F[:S0:S1]]; see README)");
}

// Each verb applies its option groups and then calls RunConfig::validate, the one check of every
// value against keel's limits; here only what a flag means beyond its value.
void apply_model_options(const po::variables_map& vm, RunConfig& c) {
  if (vm.count("model")) c.model = vm["model"].as<std::string>();
  zoo::find(c.model);  // unknown model: a clear message now
  if (vm.count("input-shape")) c.input_shape = parse_shape(vm["input-shape"].as<std::string>());
  if (vm.count("classes")) c.classes = vm["classes"].as<int64_t>();
  if (vm.count("optimizer")) c.optimizer = vm["optimizer"].as<std::string>();
  if (vm.count("lr")) {
    c.learning_rate = vm["lr"].as<float>();
    // Stored, a negative rate means "the optimizer's default"; given, it is a mistake.
    if (!(std::isfinite(c.learning_rate) && c.learning_rate > 0.0f)) {
      throw UsageError("--lr must be finite and positive, got " + std::to_string(c.learning_rate));
    }
  }
  if (vm.count("lr-schedule")) c.lr_schedule = vm["lr-schedule"].as<std::string>();
  if (vm.count("momentum")) c.momentum = vm["momentum"].as<float>();
  if (vm.count("nesterov") && vm["nesterov"].as<bool>()) c.nesterov = true;
  if (vm.count("weight-decay")) c.weight_decay = vm["weight-decay"].as<float>();
  if (vm.count("loss")) c.loss = vm["loss"].as<std::string>();
  if (vm.count("label-smoothing")) c.label_smoothing = vm["label-smoothing"].as<float>();
}

void apply_device_options(const po::variables_map& vm, RunConfig& c) {
  const bool custom = vm.count("cores") || vm.count("hbm-per-core") || vm.count("hosts");
  if (custom && vm.count("device")) {
    throw UsageError("give either --device or --cores/--hbm-per-core/--hosts, not both (a preset fixes its hosts)");
  }
  if (custom) {
    if (!vm.count("cores") || !vm.count("hbm-per-core")) {
      throw UsageError("a custom device needs both --cores N and --hbm-per-core SIZE (and optionally --hosts H)");
    }
    c.device = DeviceSpec::custom(vm["cores"].as<int>(), parse_hbm_per_core(vm["hbm-per-core"].as<std::string>()),
                                  vm.count("hosts") ? vm["hosts"].as<int>() : 1);
  } else if (vm.count("device")) {
    c.device = DeviceSpec::preset(vm["device"].as<std::string>());
  }
  if (vm.count("batch-per-core")) c.batch_per_core = vm["batch-per-core"].as<int64_t>();
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
  if (vm.count("seed")) c.seed = vm["seed"].as<uint64_t>();
  if (vm.count("shuffle-buffer")) c.shuffle_buffer = vm["shuffle-buffer"].as<int64_t>();
  if (vm.count("keep")) c.keep = vm["keep"].as<int>();
  if (vm.count("save-every-steps")) c.save_every_steps = vm["save-every-steps"].as<int64_t>();
  if (vm.count("augment")) {
    c.augment = vm["augment"].as<std::string>();
    if (c.augment.empty()) throw UsageError("--augment needs steps, e.g. --augment flip,crop:4");
  }
}

int64_t parse_hbm_per_core(const std::string& text) {
  if (text == "unbounded") return 0;
  const int64_t bytes = parse_bytes(text);
  if (bytes == 0) {
    throw UsageError("--hbm-per-core must be positive, got '" + quote_untrusted(text) +
                     "' (for a device without an HBM budget say --hbm-per-core unbounded, or --device cpu)");
  }
  return bytes;
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
      throw UsageError("bad shape '" + quote_untrusted(text) + "': expected positive sizes like 224x224x3 or 784");
    }
  }
  if (shape.empty()) throw UsageError("bad shape '" + quote_untrusted(text) + "': expected positive sizes like 224x224x3 or 784");
  check_input_shape("--input-shape", shape);
  return shape;
}

std::unique_ptr<Model> build_model(const RunConfig& config) {
  const mixed_precision::GlobalPolicyScope policy(mixed_precision::Policy(config.precision));
  return build_model_under_global_policy(config);
}

std::unique_ptr<Model> build_model_under_global_policy(const RunConfig& config) {
  zoo::ModelOptions options;
  options.input_shape = config.input_shape;
  options.classes = config.classes;
  options.include_top = config.include_top;
  options.pooling = config.pooling;
  std::unique_ptr<Model> model = zoo::build(config.model, options);
  freeze_layers(config, *model);
  check_layout_matches(config, *model);
  std::shared_ptr<Optimizer> optimizer = make_optimizer(config.optimizer, config.learning_rate, config.momentum, config.nesterov,
                                                        config.weight_decay);
  // Training always knows its decay steps (run() sets them); planning and summaries do not need them.
  if (config.lr_schedule == "cosine" && config.decay_steps > 0) {
    optimizer->set_schedule(std::make_shared<CosineDecay>(optimizer->learning_rate(), config.decay_steps));
  }
  model->compile(optimizer, make_loss(config.loss, /*from_logits=*/false, config.label_smoothing), config.metrics);
  return model;
}

ModelFactory model_factory(const RunConfig& config) {
  // The planner builds it under the policy of the savers it plans (Savers::precision).
  return [config] { return build_model_under_global_policy(config); };
}

Shape label_shape(const RunConfig& config) {
  if (make_loss(config.loss)->sparse_labels()) return {};
  return {config.classes};
}

Shape model_input(const RunConfig& config) {
  return config.input_shape.empty() ? zoo::find(config.model).default_input_shape : config.input_shape;
}

}  // namespace keel::cli
