// Layer: Keras's building block. Owns its variables (created in build(), mirrored when built inside a
// strategy scope), names them "<layer>/<weight>", and charges the tensors its call() creates as
// `activations` owned by "activation:<layer>".
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/autodiff/variable.h"
#include "framework/core/tensor.h"
#include "framework/device/ledger.h"
#include "framework/layers/dtype_policy.h"

namespace keel {

class KerasTensor;

// Resets the per-class layer name counters (Keras's clear_session): the next Dense is "dense" again.
void clear_session();
// "dense", then "dense_1", "dense_2"... per prefix, for this process (or since clear_session()).
std::string unique_layer_name(const std::string& prefix);

class Layer : public std::enable_shared_from_this<Layer> {
 public:
  // `name` empty: a unique name from the class's snake_case prefix.
  Layer(const std::string& prefix, const std::string& name);
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  virtual std::string class_name() const = 0;

  // Shapes exclude the batch dimension: Keras's input_shape=(784,).
  void build(const Shape& input_shape);
  bool built() const { return built_; }
  const Shape& input_shape() const { return input_shape_; }
  virtual Shape compute_output_shape(const Shape& input_shape) const { return input_shape; }
  // The input shape given at construction (Dense(128, "relu", {784})), if any.
  const std::optional<Shape>& declared_input_shape() const { return declared_input_shape_; }

  // Builds on first use, names the activations it creates, then call().
  Tensor operator()(const Tensor& x, bool training = false);
  virtual Tensor call(const Tensor& x, bool training) = 0;

  // Layers with several inputs (Add, Concatenate) override the *_multi forms; the defaults take
  // exactly one input and forward to the single-input forms.
  Tensor apply(const std::vector<Tensor>& inputs, bool training);
  virtual Tensor call_multi(const std::vector<Tensor>& inputs, bool training);
  virtual Shape compute_output_shape_multi(const std::vector<Shape>& input_shapes) const;
  void build_multi(const std::vector<Shape>& input_shapes);

  // Functional API: calling a layer on symbolic tensors records a node of the graph and builds the
  // layer for their shapes. The layer must be owned by a shared_ptr (the factories return one).
  KerasTensor operator()(const KerasTensor& x);
  KerasTensor operator()(const std::vector<KerasTensor>& xs);
  int num_inbound_nodes() const { return inbound_nodes_; }
  const std::vector<Shape>& input_shapes() const { return input_shapes_; }

  // Keras's layer config (the keys a Keras user recognises).
  virtual nlohmann::json get_config() const;

  std::vector<Variable*> weights() const;
  // Keras's layer.dtype_policy: the global policy when the layer was constructed, unless set here
  // (framework/layers/dtype_policy.h). Its compute dtype is what the layer's ops compute in.
  const mixed_precision::Policy& dtype_policy() const { return dtype_policy_; }
  void set_dtype_policy(const mixed_precision::Policy& policy) { dtype_policy_ = policy; }
  // Keras's layer.trainable: false freezes every weight of the layer (no gradients, no optimizer
  // slots; a frozen BatchNormalization also runs in inference mode, as in Keras 2). Set it before
  // compile. True restores each weight's own trainability (moving statistics stay non-trainable).
  void set_trainable(bool trainable);
  bool trainable() const { return trainable_; }
  std::vector<Variable*> trainable_weights() const;
  std::vector<Variable*> non_trainable_weights() const;
  int64_t count_params() const;

 protected:
  virtual void build_weights(const Shape& input_shape) {}
  virtual void build_weights_multi(const std::vector<Shape>& input_shapes);
  // A layer that takes several inputs says so (it is then checked at call time).
  virtual bool multi_input() const { return false; }
  // A variable "<layer>/<name>" in the current context, charged as `parameters`.
  Variable& add_weight(const std::string& name, const Shape& shape, const std::string& initializer,
                       bool trainable = true);
  void set_declared_input_shape(Shape s) { declared_input_shape_ = std::move(s); }
  // Whether this layer computes correctly with its weight `weight` split along `axis` across the
  // cores by a LayoutMap (framework/device/layout.h). None does unless it says so.
  virtual bool supports_layout(const std::string& weight, int axis) const { return false; }

 private:
  std::string name_;
  bool built_ = false;
  Shape input_shape_;
  std::vector<Shape> input_shapes_;
  int inbound_nodes_ = 0;
  std::optional<Shape> declared_input_shape_;
  // The axis of weight `weight` the strategy's LayoutMap splits across the cores (-1: none);
  // std::invalid_argument for a layout this layer cannot compute with.
  int laid_out_axis(const std::string& weight, const Shape& shape) const;

  std::vector<std::unique_ptr<Variable>> variables_;
  std::vector<bool> variable_trainable_;  // each weight's own trainability, as added
  bool trainable_ = true;
  mixed_precision::Policy dtype_policy_ = mixed_precision::global_policy();
};

using LayerPtr = std::shared_ptr<Layer>;

// ZeRO-3 (ShardingMode::full, framework/device/sharding.h): a layer's weights are charged to each
// core for its shard only. While a GatheredWeights lives — the layer's forward, and its backward
// (Model's BackwardOwnerHook) — the core holds their whole values too: all-gathered from every
// core's shard (the collective's bytes are counted) and charged as `workspace`, "gathered:<layer>".
// Elsewhere (another sharding, outside strategy.run) it does nothing.
class GatheredWeights {
 public:
  explicit GatheredWeights(const Layer& layer);
  ~GatheredWeights();
  GatheredWeights(const GatheredWeights&) = delete;
  GatheredWeights& operator=(const GatheredWeights&) = delete;

 private:
  std::shared_ptr<CoreLedger> ledger_;
  uint64_t handle_ = 0;
};

}  // namespace keel
