// How a run is configured: the CLI flags of `keel train`, saved in every checkpoint so that `keel
// resume` and `keel evaluate` rebuild exactly the same model, data pipeline and device.
#pragma once

#include <cstdint>
#include <atomic>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "framework/data/dataset.h"
#include "framework/device/device_spec.h"
#include "framework/device/input_context.h"
#include "framework/device/sharding.h"
#include "framework/model/model.h"
#include "framework/model/planner.h"

namespace keel::cli {

// Exit statuses (contract).
inline constexpr int kExitOk = 0;
inline constexpr int kExitUsage = 2;      // bad usage or input
inline constexpr int kExitExhausted = 3;  // HBM exhausted
inline constexpr int kExitDiverged = 4;   // training diverged: a non-finite loss or gradient

// Bad usage: printed as one line, exit 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Training stopped at a step whose loss or gradients were not finite (TerminateOnNaN): one line
// naming the step and the first non-finite variable, exit 4. Nothing after the last finite step was
// saved.
struct TrainingDiverged : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct RunConfig {
  std::string model = "mlp";
  std::string dataset = "fashion_mnist";
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  DeviceSpec device = DeviceSpec::preset("v3-8");
  ShardingMode shard = ShardingMode::none;  // --shard (tools/cli/saver_options.h); stored runs without it: none
  Remat remat = Remat::none;                // --remat (idem)
  std::string precision = "float32";        // --precision: the dtype policy (idem); stored runs without it: float32
  // --layout PATTERN=AXES (repeatable): Keras 3's LayoutMap entries (framework/device/layout.h), in order
  std::vector<std::string> layout;
  int64_t batch_per_core = 16;
  int epochs = 10;
  std::string optimizer = "adam";
  float learning_rate = -1.0f;  // negative: the optimizer's Keras default
  std::string lr_schedule = "constant";  // "constant" | "cosine" (CosineDecay to 0 over decay_steps)
  int64_t decay_steps = 0;               // cosine: 0 = every step of the run (epochs x steps per epoch)
  float momentum = 0.0f;
  bool nesterov = false;
  float weight_decay = 0.0f;  // --weight-decay: Keras 3's optimizer weight_decay; 0 none
  std::string loss = "categorical_crossentropy";
  float label_smoothing = 0.0f;  // --label-smoothing: Keras's, categorical_crossentropy only; stored runs without it: 0
  uint64_t seed = 1;
  int64_t shuffle_buffer = 60000;
  Shape input_shape;  // empty: the model's default
  int64_t classes = 10;
  int keep = 3;
  int64_t save_every_steps = 0;  // 0: only at epoch ends
  bool skip_corrupt = false;     // tfrecord:/images: skip and count corrupt records instead of stopping
  bool include_top = true;       // ResNets: the classification head (keras.applications' include_top)
  std::string pooling;           // ResNets without top: "", "avg" or "max"
  std::string freeze;            // ECMAScript regex: layers whose name it matches are frozen ("" none)
  std::string init_weights;      // the Keras weight file the run started from ("" none)
  bool init_by_name = false;     // ... loaded by layer name (else topologically)
  bool init_skip_mismatch = false;
  // compile()'s metrics by Keras's names; "accuracy" always first (evaluate --json reports it).
  std::vector<std::string> metrics = {"accuracy"};
  // Validation and Keras callbacks (tools/cli/fit_callbacks.h).
  double validation_split = 0.0;        // the last fraction of the training arrays, taken before shuffling
  std::string validation_data;          // "" none, "test": the dataset's test split
  int validation_freq = 1;
  int early_stopping_patience = -1;     // negative: no EarlyStopping
  std::string early_stopping_monitor = "val_loss";
  bool restore_best_weights = false;
  int reduce_lr_patience = -1;          // negative: no ReduceLROnPlateau
  double reduce_lr_factor = 0.1;
  // --augment: Keras preprocessing layers on each training example, before batching ("" none); the
  // grammar is Augmentation::parse's (datasets/preprocessing.h). Never applied to evaluation.
  std::string augment;
  bool save_best_only = false;          // ModelCheckpoint(save_best_only=True) writing RUN/best.h5
  std::string checkpoint_monitor = "val_loss";
  bool tensorboard = false;             // TensorBoard(log_dir=RUN/logs)

  int64_t global_batch() const { return batch_per_core * device.cores; }  // validate() checked the product
  nlohmann::json to_json() const;
  // A stored configuration (a checkpoint's): every field present with its JSON type, then validate().
  // Throws std::invalid_argument naming the field (and limit).
  static RunConfig from_json(const nlohmann::json& j);
  // Every value against keel's limits (framework/core/limits.h; README "Limits"), names against what
  // keel knows: std::invalid_argument naming the value, the flag and the limit. Each verb calls it
  // once its flags are applied; from_json calls it on what it read.
  void validate() const;
};

// --- option groups shared by the verbs ---
namespace po = boost::program_options;
void add_model_options(po::options_description& d);
void add_device_options(po::options_description& d);
// --threads N: how many threads this process computes with (keel::set_host_threads); applying it also
// checks KEEL_NUM_THREADS, so a bad value is a usage error before any work starts. Not part of a run:
// the results are the same with any number of threads.
void add_host_options(po::options_description& d);
void apply_host_options(const po::variables_map& vm);
void add_training_options(po::options_description& d);
// Reads the groups above from parsed options into `config` (only the flags that were given).
void apply_model_options(const po::variables_map& vm, RunConfig& config);
void apply_device_options(const po::variables_map& vm, RunConfig& config);
void apply_training_options(const po::variables_map& vm, RunConfig& config);

// Parses a verb's arguments; a word that is neither an option nor an expected positional argument
// is a UsageError.
po::variables_map parse_args(const std::vector<std::string>& args, const po::options_description& options,
                             const po::positional_options_description* positional = nullptr);

// "224x224x3" → {224, 224, 3}, within keel's input limits.
Shape parse_shape(const std::string& text);
// --hbm-per-core: a size ("16GiB"), or "unbounded" (0: no budget). 0 bytes is refused: it used to
// mean "unbounded" silently.
int64_t parse_hbm_per_core(const std::string& text);

// --include-top, --pooling (model options) and --freeze (training); see tools/cli/weights_options.cc.
void add_head_options(po::options_description& d);
void apply_head_options(const po::variables_map& vm, RunConfig& config);
// Marks the layers config.freeze matches non-trainable; UsageError when it matches none.
void freeze_layers(const RunConfig& config, Model& model);
// train's --init-weights FILE [--by-name] [--skip-mismatch] and --freeze REGEX.
void add_init_options(po::options_description& d);
void add_freeze_option(po::options_description& d);  // --freeze alone (keel memory)
void apply_init_options(const po::variables_map& vm, RunConfig& config);
// Loads config.init_weights into a new run's model (in the strategy's scope) and says what it loaded.
void load_init_weights(const RunConfig& config, Model& model);

// Builds (in the current scope) and compiles the configured model, its layers under config.precision.
std::unique_ptr<Model> build_model(const RunConfig& config);
// The same under whatever global dtype policy is in force (the planner's: Savers::precision).
std::unique_ptr<Model> build_model_under_global_policy(const RunConfig& config);
ModelFactory model_factory(const RunConfig& config);
// Label shape per example for the configured loss: {} for class ids, {classes} for one-hot.
Shape label_shape(const RunConfig& config);
// The model's input shape: --input-shape, or the zoo model's default.
Shape model_input(const RunConfig& config);

// The configured dataset's split, as batches of the global batch size: shuffled and with the last
// partial batch dropped for training; in order and complete for evaluation.
// --dataset forms: see tools/cli/data_sources.h.
// Under mpirun, `share.input_context` names this process's rows of each global batch: only the
// examples they need are decoded, augmented and resized (per-host input pipelines); the other rows
// stay zeros, which no replica of this process reads. The examples and their order, hence the
// pipeline's description and saved iterator states, are the same whatever the process count.
// `share.keyed_decode` false builds the file pipelines of runs saved before that (see ExampleOptions).
struct TrainingInput {
  InputContext input_context;
  bool keyed_decode = true;
};
Dataset training_dataset(const RunConfig& config, const TrainingInput& share = {});
Dataset evaluation_dataset(const RunConfig& config, const std::string& split);
// fit's validation_data: the last config.validation_split of the training arrays (Fashion-MNIST), or
// the split config.validation_data names; nullopt when neither is set.
std::optional<Dataset> validation_dataset(const RunConfig& config);
// Records and images skipped by --skip-corrupt in this process.
std::shared_ptr<std::atomic<int64_t>> skipped_records();

}  // namespace keel::cli
