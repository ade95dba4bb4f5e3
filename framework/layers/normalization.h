// Keras's BatchNormalization (channels on the last axis), and the hook a Model calls to update the
// moving statistics once per training step.
//
// Replication. Under ReplicatedStrategy each replica calls the layer on its own shard, on its own
// thread, and normalises with its own batch statistics (TPUStrategy's default; no cross-replica
// sync). Keras creates moving_mean / moving_variance with synchronization=ON_READ and
// aggregation=MEAN: every replica updates its own copy with its own statistics, and reading the
// variable outside a replica gives the mean of the copies. Because the update is linear and the
// copies start equal, that mean evolves exactly as one shared variable updated with every
// replica's result averaged, which is what keel keeps: one mirrored buffer, never written from
// replica threads. call(x, training=true) only records the batch statistics in a per-replica slot;
// apply_moving_average_update(), called once after every replica has finished the step, applies
//   copy_r   = moving - (moving - stat_r) * (1 - momentum)     (Keras's assign_moving_average)
//   moving   = mean over replicas r of copy_r, summed in replica order
// A replica whose shard was empty keeps moving unchanged in that mean (Keras skips the update when
// the input batch is empty); a replica that called the layer twice applies both, in call order.
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

#include "framework/layers/layer.h"

namespace keel {
namespace layers {

class BatchNormalization : public Layer {
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
  // training: batch statistics (recorded for apply_moving_average_update); else the moving ones.
  Tensor call(const Tensor& x, bool training) override;
  nlohmann::json get_config() const override;

  // Folds the statistics recorded by training calls since the last update into the moving
  // variables (formula above), then forgets them. Call from one thread, after every replica has
  // finished its forward pass of the step and before the next step's forward pass; a no-op when
  // nothing was recorded (an inference step) and on abstract (planning) variables.
  void apply_moving_average_update();
  bool has_pending_moving_average_update() const;

  float momentum() const { return options_.momentum; }
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
  // Per-channel gamma or beta: the variable, or a constant when scale/center is off.
  Tensor gamma_or_ones(int64_t channels) const;
  Tensor beta_or_zeros(int64_t channels) const;
  void record_batch_stats(const Tensor& mean, const Tensor& variance);

  Options options_;
  Variable* gamma_ = nullptr;            // (C,)
  Variable* beta_ = nullptr;             // (C,)
  Variable* moving_mean_ = nullptr;      // (C,) non-trainable
  Variable* moving_variance_ = nullptr;  // (C,) non-trainable

  mutable std::mutex pending_mu_;
  int pending_replicas_ = 0;                    // num_replicas of the step being recorded; 0: none
  std::vector<std::vector<BatchStats>> pending_;  // [replica][call], in call order
};

// The BatchNormalization layers among `layers`, in order.
std::vector<BatchNormalization*> batch_normalization_layers(const std::vector<Layer*>& layers);
// apply_moving_average_update() on each of them: what a Model calls once after a training step.
void apply_moving_average_updates(const std::vector<Layer*>& layers);

}  // namespace layers

// Factories spelled like Keras's constructor.
std::shared_ptr<layers::BatchNormalization> BatchNormalization(float momentum = 0.99f, float epsilon = 1e-3f,
                                                               std::string name = "");
std::shared_ptr<layers::BatchNormalization> BatchNormalization(layers::BatchNormalization::Options options);

}  // namespace keel
