// Keras's BatchNormalization (channels on the last axis).
//
// Replication. Under ReplicatedStrategy each replica calls the layer on its own shard, on its own
// thread, and normalises with its own batch statistics (TPUStrategy's default; no cross-replica
// sync). Keras creates moving_mean / moving_variance with synchronization=ON_READ and
// aggregation=MEAN: every replica updates its own copy with its own statistics, and reading the
// variable outside a replica gives the mean of the copies. Because the update is linear and the
// copies start equal, that mean evolves exactly as one shared variable updated with every
// replica's result averaged, which is what keel keeps: one mirrored buffer. The layer is a
// ReplicaLocalState: call(x, training=true) inside strategy.run records the batch statistics for its
// replica and marks the layer; when the run ends, replica_contributions computes each replica's copy
//   copy_r   = moving - (moving - stat_r) * (1 - momentum)     (Keras's assign_moving_average)
// the strategy averages the copies (mean, the collectives' tree order; every layer's in one
// all-reduce) and take_means writes them to the moving variables.
// A replica whose shard was empty keeps moving unchanged in that mean (Keras skips the update when
// the input batch is empty); a replica that called the layer twice applies both, in call order.
// Outside strategy.run (one replica) the update is applied at once, as Keras does in eager mode.
// Difference from TensorFlow: inference inside a replica reads the averaged value, not a
// per-replica copy (they would differ only in replica-local drift).
//
// Variance convention: the moving variance follows the *biased* batch variance (divided by count),
// as Keras does (it removes the Bessel correction of TF's fused batch norm); PyTorch's running_var
// uses the unbiased one.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "framework/device/replica_context.h"
#include "framework/layers/layer.h"

namespace keel {
namespace layers {

class BatchNormalization : public Layer, public ReplicaLocalState {
 public:
  struct Options {
    int axis = -1;  // Keras counts the batch axis: for NHWC input, -1 or 3. Only the last axis.
    float momentum = 0.99f;
    float epsilon = 1e-3f;
    bool center = true;  // beta
    bool scale = true;   // gamma
    std::string beta_initializer = "zeros";
    std::string gamma_initializer = "ones";
    std::string moving_mean_initializer = "zeros";
    std::string moving_variance_initializer = "ones";
    std::optional<Shape> input_shape;  // without the batch axis
    std::string name;
  };
  explicit BatchNormalization(Options options);
  std::string class_name() const override { return "BatchNormalization"; }
  // training: batch statistics (and the moving-average update, above); else the moving ones.
  Tensor call(const Tensor& x, bool training) override;
  nlohmann::json get_config() const override;
  // This layer and the Activation("relu") layer named `relu_layer` that reads its output alone, as
  // one op (ops::batch_norm_training's relu; the bits of the two layers one after the other, one
  // pass fewer over the activations each way): Layer::apply's work, the output charged to the ReLU
  // layer's activations. Functional runs such pairs so.
  Tensor apply_with_relu(const Tensor& x, bool training, const std::string& relu_layer);
  // The same with an Add of `residual` between the two (a ResNet block's end): ReLU(residual + this
  // layer's output), as ops::batch_norm_add_relu_training; residual in the compute dtype.
  Tensor apply_with_add_relu(const Tensor& x, const Tensor& residual, bool training, const std::string& relu_layer);

  // Folds this step's statistics of every replica into the moving variables (formula above).
  std::vector<Tensor> replica_contributions(ReplicaContext& ctx) override;
  void take_means(ReplicaContext& ctx, std::span<Tensor> means) override;

  float momentum() const { return options_.momentum; }
  // The momentum of the next moving-average updates in place of momentum() (which the config keeps);
  // std::nullopt returns to momentum(). Model::recompute_batch_statistics gives its k-th batch
  // 1 - 1/k, which makes the moving statistics the plain average of the batches' statistics.
  void set_update_momentum(std::optional<double> momentum);
  float epsilon() const { return options_.epsilon; }
  // nullptr before build (and gamma/beta when scale/center is false).
  Variable* gamma() const { return gamma_; }
  Variable* beta() const { return beta_; }
  Variable* moving_mean() const { return moving_mean_; }
  Variable* moving_variance() const { return moving_variance_; }

 protected:
  void build_weights(const Shape& input_shape) override;

 private:
  struct BatchStats {
    std::vector<float> mean;      // (C,)
    std::vector<float> variance;  // (C,) biased
  };
  Tensor forward(const Tensor& x, bool training, bool relu, const Tensor* residual = nullptr);
  // Per-channel gamma or beta: the variable, or a constant when scale/center is off.
  Tensor gamma_or_ones(int64_t channels) const;
  Tensor beta_or_zeros(int64_t channels) const;
  void record_batch_stats(int replica, int replicas, const Tensor& mean, const Tensor& variance);
  // This replica's copy of `moving` after its recorded calls, as a new (C,) workspace tensor.
  Tensor replica_copy(const Variable& moving, std::vector<float> BatchStats::*stat,
                      const std::vector<BatchStats>& calls) const;

  Options options_;
  std::optional<double> update_momentum_;
  Variable* gamma_ = nullptr;            // (C,)
  Variable* beta_ = nullptr;             // (C,)
  Variable* moving_mean_ = nullptr;      // (C,) non-trainable
  Variable* moving_variance_ = nullptr;  // (C,) non-trainable

  std::mutex pending_mu_;
  int pending_replicas_ = 0;                    // num_replicas of the step being recorded; 0: none
  std::vector<std::vector<BatchStats>> pending_;  // [replica][call], in call order
};

}  // namespace layers

// Factories spelled like Keras's constructor.
std::shared_ptr<layers::BatchNormalization> BatchNormalization(float momentum = 0.99f, float epsilon = 1e-3f,
                                                               std::string name = "");
std::shared_ptr<layers::BatchNormalization> BatchNormalization(layers::BatchNormalization::Options options);

}  // namespace keel
