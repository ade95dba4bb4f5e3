#include "framework/layers/layer.h"

#include <map>
#include <optional>
#include <stdexcept>
#include <mutex>

#include "framework/device/context.h"
#include "framework/device/replica_context.h"
#include "framework/device/strategy.h"
#include "framework/layers/initializers.h"
#include "framework/ops/precision.h"

namespace keel {
namespace {

std::mutex g_names_mu;
std::map<std::string, int>& name_counters() {
  static std::map<std::string, int> counters;
  return counters;
}

}  // namespace

void clear_session() {
  std::lock_guard<std::mutex> lock(g_names_mu);
  name_counters().clear();
}

std::string unique_layer_name(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(g_names_mu);
  int& n = name_counters()[prefix];
  const std::string name = n == 0 ? prefix : prefix + "_" + std::to_string(n);
  ++n;
  return name;
}

Layer::Layer(const std::string& prefix, const std::string& name)
    : name_(name.empty() ? unique_layer_name(prefix) : name) {}

void Layer::build(const Shape& input_shape) { build_multi({input_shape}); }

void Layer::build_multi(const std::vector<Shape>& input_shapes) {
  if (built_) return;
  if (input_shapes.empty()) throw std::invalid_argument("layer '" + name_ + "' called with no inputs");
  input_shapes_ = input_shapes;
  input_shape_ = input_shapes.front();
  build_weights_multi(input_shapes);
  built_ = true;
}

void Layer::build_weights_multi(const std::vector<Shape>& input_shapes) {
  if (input_shapes.size() != 1) {
    throw std::invalid_argument("layer '" + name_ + "' (" + class_name() + ") takes one input, got " +
                                std::to_string(input_shapes.size()));
  }
  build_weights(input_shapes[0]);
}

Tensor Layer::apply(const std::vector<Tensor>& inputs, bool training) {
  if (!built_) {
    std::vector<Shape> shapes;
    for (const Tensor& t : inputs) shapes.emplace_back(t.shape().begin() + 1, t.shape().end());
    build_multi(shapes);
  }
  OwnerScope owner("activation:" + name_);
  const ops::ComputeDTypeScope compute(dtype_policy_.compute_dtype());
  const GatheredWeights gathered(*this);
  return call_multi(inputs, training);
}

Tensor Layer::call_multi(const std::vector<Tensor>& inputs, bool training) {
  if (inputs.size() != 1) {
    throw std::invalid_argument("layer '" + name_ + "' (" + class_name() + ") takes one input, got " +
                                std::to_string(inputs.size()));
  }
  return call(inputs[0], training);
}

Shape Layer::compute_output_shape_multi(const std::vector<Shape>& input_shapes) const {
  if (input_shapes.size() != 1) {
    throw std::invalid_argument("layer '" + name_ + "' (" + class_name() + ") takes one input, got " +
                                std::to_string(input_shapes.size()));
  }
  return compute_output_shape(input_shapes[0]);
}

Tensor Layer::operator()(const Tensor& x, bool training) {
  if (!built_) build(Shape(x.shape().begin() + 1, x.shape().end()));
  OwnerScope owner("activation:" + name_);
  const ops::ComputeDTypeScope compute(dtype_policy_.compute_dtype());
  const GatheredWeights gathered(*this);
  return call(x, training);
}

GatheredWeights::GatheredWeights(const Layer& layer) {
  ReplicaContext* ctx = current_replica_context();
  const DeviceContext& here = device_context();
  if (ctx == nullptr || !ctx->has_collectives() || ctx->strategy().shard() != ShardingMode::full || here.ledger == nullptr ||
      here.core < 0) {
    return;
  }
  std::vector<Tensor> values;
  int64_t elements = 0;
  for (Variable* v : layer.weights()) {
    values.push_back(v->value());
    elements += v->value().size();
  }
  if (values.empty()) return;
  ctx->all_gather_shards(values);  // each core's shard to every core; on the host they share one buffer
  ledger_ = here.ledger->core_ptr(here.core);
  handle_ = ledger_->charge(elements * static_cast<int64_t>(sizeof(float)), Category::workspace, "gathered:" + layer.name(),
                            {elements});
}

GatheredWeights::~GatheredWeights() {
  if (handle_ != 0) ledger_->release(handle_);
}

nlohmann::json Layer::get_config() const {
  nlohmann::json config = {{"name", name_}, {"trainable", trainable_}, {"dtype", dtype_policy_.name()}};
  if (declared_input_shape_) {
    nlohmann::json shape = nlohmann::json::array({nullptr});
    for (int64_t d : *declared_input_shape_) shape.push_back(d);
    config["batch_input_shape"] = shape;
  }
  return config;
}

Variable& Layer::add_weight(const std::string& name, const Shape& shape, const std::string& initializer,
                            bool trainable) {
  const std::string full = name_ + "/" + name;
  // ZeRO-3: created inside a scope whose strategy shards parameters, each core is charged its shard;
  // with a LayoutMap that matches the variable, its block of the laid-out axis.
  const int axis = laid_out_axis(name, shape);
  std::optional<ContextScope> sharded;
  enter_sharded_scope_if(sharded, ShardingMode::full, Category::parameters);
  enter_laid_out_scope_if(sharded, axis, Category::parameters);
  Tensor value = Tensor::empty(shape, Category::parameters, full);
  initialize(value, initializer, next_initializer_key());
  variables_.push_back(std::make_unique<Variable>(full, std::move(value), trainable && trainable_));
  variables_.back()->set_sharded_axis(axis);
  variable_trainable_.push_back(trainable);
  return *variables_.back();
}

int Layer::laid_out_axis(const std::string& weight, const Shape& shape) const {
  const DeviceContext& here = device_context();
  const distribution::LayoutMap* map = here.strategy != nullptr ? here.strategy->layout_map() : nullptr;
  if (map == nullptr || here.core >= 0) return -1;
  const std::string path = name_ + "/" + weight;
  const std::optional<distribution::TensorLayout> layout = map->find(path);
  if (!layout) return -1;
  if (layout->axes.size() != shape.size()) {
    throw std::invalid_argument("layout " + layout->to_string() + " for '" + path + "' has " +
                                std::to_string(layout->axes.size()) + " axes; the variable has " +
                                std::to_string(shape.size()) + " " + shape_string(shape));
  }
  const int axis = layout->sharded_axis();
  if (axis >= 0 && !supports_layout(weight, axis)) {
    throw std::invalid_argument("layout " + layout->to_string() + " for '" + path + "' (" + class_name() +
                                "): keel lays out only Dense kernels along their output axis (None, model) and "
                                "Dense biases (model,); leave this variable out of the layout map");
  }
  return axis;
}

void Layer::set_trainable(bool trainable) {
  trainable_ = trainable;
  for (size_t i = 0; i < variables_.size(); ++i) variables_[i]->set_trainable(trainable && variable_trainable_[i]);
}

std::vector<Variable*> Layer::weights() const {
  // Keras order: trainable first, then non-trainable.
  std::vector<Variable*> out = trainable_weights();
  for (Variable* v : non_trainable_weights()) out.push_back(v);
  return out;
}

std::vector<Variable*> Layer::trainable_weights() const {
  std::vector<Variable*> out;
  for (const auto& v : variables_) {
    if (v->trainable()) out.push_back(v.get());
  }
  return out;
}

std::vector<Variable*> Layer::non_trainable_weights() const {
  std::vector<Variable*> out;
  for (const auto& v : variables_) {
    if (!v->trainable()) out.push_back(v.get());
  }
  return out;
}

int64_t Layer::count_params() const {
  int64_t n = 0;
  for (const auto& v : variables_) n += num_elements(v->shape());
  return n;
}

}  // namespace keel
