// Model: Keras's Model API over keel's strategy — compile, fit, evaluate, predict, summary.
//
// A model remembers the ReplicatedStrategy whose scope it was built in (as Keras does); its steps
// then run once per replica. Built outside any scope, it runs on a private one-core "cpu" strategy.
#pragma once

#include <functional>
#include <atomic>
#include <map>
#include <mutex>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/data/dataset.h"
#include "framework/device/strategy.h"
#include "framework/layers/layer.h"
#include "framework/model/remat.h"
#include "framework/train/losses.h"
#include "framework/train/optimizers.h"

namespace keel {

class Model;

using Logs = std::map<std::string, double>;  // "loss", "accuracy", "val_loss", ...

// Summed step results: loss_sum / samples is the mean loss; correct / samples the accuracy;
// in_top_k / samples the top-k accuracy (0 unless the model is compiled with a top-k metric).
struct StepTotals {
  double loss_sum = 0;
  int64_t correct = 0;
  int64_t samples = 0;
  int64_t in_top_k = 0;  // last: {loss_sum, correct, samples} initialisers keep their meaning
  StepTotals& operator+=(const StepTotals& o) {
    loss_sum += o.loss_sum;
    correct += o.correct;
    in_top_k += o.in_top_k;
    samples += o.samples;
    return *this;
  }
};

// The metrics compile() knows, by Keras's names (the logs' keys): "accuracy" (Keras's
// categorical_accuracy or sparse_categorical_accuracy, as the loss's labels are),
// "top_k_categorical_accuracy" (one-hot labels) and "sparse_top_k_categorical_accuracy" (class ids),
// with Keras's k = 5.
inline constexpr int kTopK = 5;
// std::invalid_argument naming the metric and what to use instead, for an unknown name, a top-k
// metric for the other kind of labels, or a name given twice.
void check_metrics(const std::vector<std::string>& metrics, bool sparse_labels);
// Whether any of compile()'s metrics is a top-k accuracy.
bool has_top_k(const std::vector<std::string>& metrics);

// A training step whose loss or gradients were not all finite (a diverging run). The optimizer
// skips an update with a non-finite gradient (framework/train/optimizers.h), so the variables and
// slots are still the last finite step's; a step whose loss alone was not finite was applied.
struct NonFiniteStep {
  int64_t step = 0;          // 1-based: the optimizer's iterations before it, plus one
  double loss = 0.0;         // the step's mean loss (NaN or +-inf when it is the loss that was not finite)
  std::string variable;      // the first variable whose all-reduced gradient was not finite; empty if none
  bool update_skipped = false;
  // "step 3: loss nan, gradient of 'dense/kernel' not finite (the update was not applied)"
  std::string describe() const;
};

// What callbacks see during fit (Keras passes the model; keel adds the resumable position).
struct TrainingState {
  Model* model = nullptr;
  int epoch = 0;                 // 0-based
  int epochs = 0;                // total
  int64_t batch = 0;             // batches done in this epoch
  int64_t steps_per_epoch = -1;  // -1 when unknown
  const Iterator* iterator = nullptr;
  // The iterator's position after the last batch a step has consumed. fit() pulls the next batch
  // into the cores' prefetch slot before a step runs, so the iterator itself is one batch ahead;
  // checkpoints save this position, never the iterator's own.
  const Iterator::Snapshot* position = nullptr;
  nlohmann::json iterator_state() const { return iterator->save(*position); }
  StepTotals epoch_totals;       // summed over this epoch's batches so far
  bool stop_training = false;    // set by a callback: fit returns after this step
  // In on_train_batch_end (and the on_epoch_end that may follow it): set when this step's loss or
  // gradients were not finite. Such a step must not be saved; TerminateOnNaN stops training on it.
  std::optional<NonFiniteStep> non_finite;
  // In on_train_batch_end: this batch was the epoch's last (known even when the cardinality is not,
  // because the next batch has already been pulled into the prefetch slot).
  bool last_batch_of_epoch = false;
  // The input pipeline's share of this epoch (this process): time spent waiting in the dataset
  // iterator's next() versus the whole time of the epoch's steps (waiting included), and the bytes
  // moved host -> cores by infeed, summed over cores.
  double input_wait_seconds = 0.0;
  double step_seconds = 0.0;
  int64_t infeed_bytes = 0;
  // Bytes the cores sent each other through the collectives this epoch, summed over cores.
  int64_t collective_bytes = 0;
  double input_bound_fraction() const { return step_seconds > 0.0 ? input_wait_seconds / step_seconds : 0.0; }
};

class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin(TrainingState&) {}
  virtual void on_epoch_begin(TrainingState&) {}
  virtual void on_train_batch_end(TrainingState&, const Logs&) {}
  virtual void on_epoch_end(TrainingState&, const Logs&) {}
  virtual void on_train_end(TrainingState&) {}
};

struct FitOptions {
  int epochs = 1;
  int initial_epoch = 0;
  // Resume mid-epoch: the data iterator's saved position in epoch `initial_epoch`, and the running
  // metric sums of that epoch so far.
  nlohmann::json initial_iterator_state;
  StepTotals initial_epoch_totals;
  std::vector<Callback*> callbacks;
  // Keras's validation: evaluated after every validation_freq-th epoch (epoch + 1 divisible by it),
  // adding val_loss and val_accuracy to that epoch's logs. validation_split (Keras: the last fraction
  // of the arrays, before shuffling) cannot be taken from a Dataset, as in Keras; fit refuses it, and
  // `keel train --validation-split` applies it where the arrays are (tools/cli/run_config.cc).
  std::optional<Dataset> validation_data;
  int validation_freq = 1;
  double validation_split = 0.0;
};

struct History {
  std::vector<Logs> epochs;
};

// One row of Keras's model.summary(): a layer (a functional model: one call of it), its output shape
// with the batch as -1, its parameters (counted at a layer's first call only) and, in a functional
// model, the calls it is connected to, as Keras prints them ("conv1_pad[0][0]": layer, node, tensor).
struct SummaryRow {
  std::string name;
  std::string class_name;
  Shape output_shape;
  int64_t params = 0;
  std::vector<std::string> connected_to;  // empty for a Sequential model's rows and input layers
};

class Model {
 public:
  explicit Model(std::string name);
  virtual ~Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const std::string& name() const { return name_; }
  virtual std::string class_name() const = 0;
  virtual std::vector<Layer*> layers() const = 0;
  virtual Shape input_shape() const = 0;   // without the batch dimension
  virtual Shape output_shape() const = 0;
  virtual Tensor call(const Tensor& x, bool training) = 0;
  // Creates the weights for inputs of this shape (without batch) if not done yet.
  virtual void build(const Shape& input_shape) = 0;
  Tensor operator()(const Tensor& x, bool training = false) { return call(x, training); }
  // Keras's get_config()/to_json: {"class_name": ..., "config": {...}}.
  virtual nlohmann::json to_config() const = 0;
  virtual std::string summary() const;
  // What summary() prints, row by row (`keel summary --json`).
  virtual std::vector<SummaryRow> summary_rows() const;

  std::vector<Variable*> variables() const;  // per layer: trainable, then non-trainable
  std::vector<Variable*> trainable_variables() const;
  std::vector<Variable*> non_trainable_variables() const;
  int64_t count_params() const;

  ReplicatedStrategy& strategy() { return *strategy_; }

  // Rematerialisation of the training forward pass (framework/model/remat.h); none by default.
  void set_remat(Remat remat) { remat_ = std::move(remat); }
  const Remat& remat() const { return remat_; }

  void compile(std::shared_ptr<Optimizer> optimizer, std::shared_ptr<Loss> loss,
               std::vector<std::string> metrics = {"accuracy"});
  bool compiled() const { return optimizer_ != nullptr; }
  const std::vector<std::string>& metrics() const { return metrics_; }
  // The logs of summed results: "loss", then each compiled metric.
  Logs logs_of(const StepTotals& totals) const;
  Optimizer& optimizer() { return *optimizer_; }
  const Loss& loss() const { return *loss_; }

  // Dataset elements are {x, y} batches of the global batch size; each is split over the replicas.
  History fit(const Dataset& dataset, const FitOptions& options);
  // As Keras's evaluate(steps=): the first `steps` batches of `dataset` (all there are, if fewer), or
  // every batch (steps < 0); 0 is refused.
  Logs evaluate(const Dataset& dataset, int64_t steps = -1);
  Tensor predict(const Tensor& x, int64_t batch_size = 32);
  // Precise BatchNormalization statistics: runs up to `batches` batches of `dataset` forward in
  // training mode (each replica normalising its shard, as in training; no gradients, weights frozen)
  // and sets every BatchNormalization's moving mean and variance to the plain average of those
  // batches' statistics, replacing an exponential average that lags behind weights that moved.
  // Returns the number of batches used (fewer when the dataset ends first). std::invalid_argument
  // when the model has no BatchNormalization layer.
  int64_t recompute_batch_statistics(const Dataset& dataset, int64_t batches);

  // One training step on one global batch: infeed (each replica copies its shard to its core), then
  // train_step_on_cores.
  StepTotals train_step(const Batch& global);
  // One training step on shards already on the cores (shards[r] on core r, as distribute() makes
  // them): forward, loss, gradients, all-reduce, update. Each replica releases its shard once its
  // forward and backward passes are done.
  StepTotals train_step_on_cores(std::vector<Batch> shards);
  // Whether train_step_on_cores runs `shards` as one host program for all the replicas
  // (framework/model/host_step.cc): the same step to the bit and on every core's ledger, each op run
  // once instead of once per replica. Where the model treats each row alone (a Sequential of Dense,
  // Activation and Flatten layers in float32, a cross-entropy loss, no remat), on two or more
  // replicas in one process with nothing partitioned, and the shards are of equal rows, a multiple of
  // 16. KEEL_HOST_PROGRAM=0: never.
  bool steps_as_host_program(const std::vector<Batch>& shards) const;
  // Forward in inference mode; loss and correct predictions summed over the batch.
  StepTotals test_step(const Batch& global);
  // Set by the last train_step when its loss or gradients were not finite; nullopt otherwise.
  const std::optional<NonFiniteStep>& last_step_non_finite() const { return non_finite_; }

 protected:
  // Called by subclasses once the layers exist, inside the scope the model was created in.
  void capture_strategy();
  // Remat's per-layer modes (full, larger_than, layers): runs `layer` on `x`, rematerialised when the
  // mode says so for it (the caller keeps the head out).
  Tensor call_layer(Layer& layer, const Tensor& x, bool training) const;

 private:
  StepTotals train_step_as_host_program(std::vector<Batch> shards);
  // ZeRO-3: the BackwardOwnerFn that gathers each layer's weights for its backward; null otherwise.
  BackwardOwnerFn weights_gatherer() const;
  // fit()'s steps over one epoch; false when a callback stopped training before the epoch's end.
  bool train_epoch(Iterator& it, TrainingState& st, const std::vector<Callback*>& callbacks);
  // The logs of an epoch that ended: its totals, and the validation's when this epoch has one.
  Logs epoch_logs(const TrainingState& st, const FitOptions& options);
  // The end of a training step: every replica's totals summed (gathered from the other processes
  // first), and non_finite_step() set from them and the update.
  StepTotals step_totals(std::vector<StepTotals>& per_replica, const GradientUpdate& update, int64_t step);

  std::string name_;
  ReplicatedStrategy* strategy_ = nullptr;
  std::unique_ptr<ReplicatedStrategy> own_strategy_;
  std::shared_ptr<Optimizer> optimizer_;
  std::shared_ptr<Loss> loss_;
  std::vector<std::string> metrics_;
  std::optional<NonFiniteStep> non_finite_;
  Remat remat_ = Remat::none;
};

// Keras's Sequential: layers applied in order. Built at construction when the first layer declares
// its input shape (Dense(128, "relu", {784})), else on build() or the first call.
class Sequential : public Model {
 public:
  explicit Sequential(std::vector<LayerPtr> layers, std::string name = "");
  std::string class_name() const override { return "Sequential"; }
  std::vector<Layer*> layers() const override;
  Shape input_shape() const override { return input_shape_; }
  Shape output_shape() const override;
  void build(const Shape& input_shape) override;
  bool built() const { return built_; }
  Tensor call(const Tensor& x, bool training) override;
  nlohmann::json to_config() const override;

 private:
  std::vector<LayerPtr> layers_;
  Shape input_shape_;
  std::mutex build_mu_;
  std::atomic<bool> built_{false};
};

}  // namespace keel
