#include "framework/layers/normalization.h"

#include <charconv>
#include <cstdlib>
#include <stdexcept>

#include "framework/autodiff/recompute.h"
#include "framework/device/context.h"
#include "framework/layers/initializers.h"
#include "framework/ops/batch_norm.h"
#include "framework/ops/precision.h"

namespace keel {
namespace layers {
namespace {

// The double a Keras user wrote for a float option: 0.99f -> 0.99 (its shortest decimal form), so
// configs print 0.99 rather than 0.9900000095367432, and 1 - momentum is Keras's 0.01.
double decimal_value(float f) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf) - 1, f);
  if (ec != std::errc()) return static_cast<double>(f);
  *end = '\0';
  return std::strtod(buf, nullptr);
}

}  // namespace

BatchNormalization::BatchNormalization(Options options)
    : Layer("batch_normalization", options.name), options_(std::move(options)) {
  // Unknown initializer names fail here rather than at build.
  for (const std::string* init : {&options_.beta_initializer, &options_.gamma_initializer,
                                  &options_.moving_mean_initializer, &options_.moving_variance_initializer}) {
    initializer_config(*init);
  }
  if (options_.axis < -1) {
    throw std::invalid_argument("BatchNormalization: only the last (channels) axis is supported, got axis " +
                                std::to_string(options_.axis));
  }
  if (options_.input_shape) set_declared_input_shape(*options_.input_shape);
}

void BatchNormalization::build_weights(const Shape& input_shape) {
  if (input_shape.empty()) {
    throw std::invalid_argument("BatchNormalization '" + name() + "' needs inputs with a channels axis");
  }
  const int last = static_cast<int>(input_shape.size());  // Keras's index of the last axis (batch is 0)
  if (options_.axis != -1 && options_.axis != last) {
    throw std::invalid_argument("BatchNormalization '" + name() + "': only the last (channels) axis is supported; axis " +
                                std::to_string(options_.axis) + " for inputs of shape " + shape_string(input_shape));
  }
  const int64_t channels = input_shape.back();
  // Keras's creation order; weights() then lists trainable first, which is the same order.
  if (options_.scale) gamma_ = &add_weight("gamma", {channels}, options_.gamma_initializer);
  if (options_.center) beta_ = &add_weight("beta", {channels}, options_.beta_initializer);
  moving_mean_ = &add_weight("moving_mean", {channels}, options_.moving_mean_initializer, /*trainable=*/false);
  moving_variance_ =
      &add_weight("moving_variance", {channels}, options_.moving_variance_initializer, /*trainable=*/false);
}

Tensor BatchNormalization::gamma_or_ones(int64_t channels) const {
  return gamma_ ? gamma_->value() : Tensor::full({channels}, 1.0f);
}

Tensor BatchNormalization::beta_or_zeros(int64_t channels) const {
  return beta_ ? beta_->value() : Tensor::zeros({channels});
}

Tensor BatchNormalization::call(const Tensor& x, bool training) { return forward(x, training, false); }

Tensor BatchNormalization::apply_with_relu(const Tensor& x, bool training, const std::string& relu_layer) {
  if (!built()) build(Shape(x.shape().begin() + 1, x.shape().end()));
  OwnerScope owner("activation:" + relu_layer);
  const ops::ComputeDTypeScope compute(dtype_policy().compute_dtype());
  const GatheredWeights gathered(*this);
  return forward(x, training, true);
}

Tensor BatchNormalization::apply_with_add_relu(const Tensor& x, const Tensor& residual, bool training,
                                               const std::string& relu_layer) {
  if (!built()) build(Shape(x.shape().begin() + 1, x.shape().end()));
  OwnerScope owner("activation:" + relu_layer);
  const ops::ComputeDTypeScope compute(dtype_policy().compute_dtype());
  const GatheredWeights gathered(*this);
  return forward(x, training, true, &residual);
}

Tensor BatchNormalization::forward(const Tensor& x, bool training, bool relu, const Tensor* residual) {
  const int64_t channels = moving_mean_->shape()[0];
  if (x.rank() < 2 || x.dim(-1) != channels) {
    throw std::invalid_argument("BatchNormalization '" + name() + "' expects inputs (batch, ..., " +
                                std::to_string(channels) + "), got " + shape_string(x.shape()));
  }
  const Tensor gamma = gamma_or_ones(channels), beta = beta_or_zeros(channels);
  const float epsilon = options_.epsilon;
  if (!training || !trainable()) {  // frozen: inference mode, as Keras 2's BatchNormalization
    if (residual != nullptr) {
      return ops::batch_norm_add_relu_inference(x, gamma, beta, *residual, moving_mean_->value(), moving_variance_->value(),
                                                epsilon);
    }
    return ops::batch_norm_inference(x, gamma, beta, moving_mean_->value(), moving_variance_->value(), epsilon, relu);
  }
  ops::BatchNormResult r = residual != nullptr ? ops::batch_norm_add_relu_training(x, gamma, beta, *residual, epsilon)
                                               : ops::batch_norm_training(x, gamma, beta, epsilon, relu);
  if (recomputing()) return r.y;  // remat's second pass: the first one has recorded the statistics
  ReplicaContext* ctx = current_replica_context();
  // An empty shard has no statistics (Keras leaves that replica's copy unchanged); an abstract one
  // has no values, but is marked all the same so that a plan makes the real step's collective calls.
  const bool has_stats = x.size() > 0 && !r.mean.is_abstract();
  if (ctx == nullptr) {
    if (has_stats) record_batch_stats(0, 1, r.mean, r.variance);
    std::lock_guard<std::mutex> lock(pending_mu_);
    if (pending_replicas_ == 1) {
      moving_mean_->mutable_value().copy_from(replica_copy(*moving_mean_, &BatchStats::mean, pending_[0]));
      moving_variance_->mutable_value().copy_from(replica_copy(*moving_variance_, &BatchStats::variance, pending_[0]));
      pending_.clear();
      pending_replicas_ = 0;
    }
    return r.y;
  }
  if (has_stats) record_batch_stats(ctx->replica_id(), ctx->num_replicas(), r.mean, r.variance);
  ctx->mark_for_sync(this);
  return r.y;
}

void BatchNormalization::record_batch_stats(int replica, int replicas, const Tensor& mean, const Tensor& variance) {
  BatchStats stats{mean.to_vector(), variance.to_vector()};
  std::lock_guard<std::mutex> lock(pending_mu_);
  if (pending_replicas_ == 0) {
    pending_replicas_ = replicas;
    pending_.assign(static_cast<size_t>(replicas), {});
  } else if (pending_replicas_ != replicas) {
    throw std::logic_error("BatchNormalization '" + name() + "': statistics recorded over " +
                           std::to_string(pending_replicas_) + " and " + std::to_string(replicas) +
                           " replicas in one step");
  }
  pending_[static_cast<size_t>(replica)].push_back(std::move(stats));
}

Tensor BatchNormalization::replica_copy(const Variable& moving, std::vector<float> BatchStats::*stat,
                                        const std::vector<BatchStats>& calls) const {
  Tensor copy = Tensor::empty(moving.shape(), Category::workspace, moving.name() + ":replica_copy");
  if (copy.is_abstract() || moving.value().is_abstract()) return copy;
  const double decay = 1.0 - update_momentum_.value_or(decimal_value(options_.momentum));
  const float* m = moving.value().data();
  float* out = copy.data();
  for (size_t c = 0; c < static_cast<size_t>(copy.size()); ++c) {
    double value = static_cast<double>(m[c]);
    for (const BatchStats& s : calls) value -= (value - static_cast<double>((s.*stat)[c])) * decay;
    out[c] = static_cast<float>(value);
  }
  return copy;
}

void BatchNormalization::set_update_momentum(std::optional<double> momentum) {
  if (momentum && !(*momentum >= 0.0 && *momentum <= 1.0)) {
    throw std::invalid_argument("BatchNormalization '" + name() + "': momentum must be in [0, 1], got " +
                                std::to_string(*momentum));
  }
  update_momentum_ = momentum;
}

std::vector<Tensor> BatchNormalization::replica_contributions(ReplicaContext& ctx) {
  std::vector<BatchStats> calls;
  {
    std::lock_guard<std::mutex> lock(pending_mu_);
    const size_t replica = static_cast<size_t>(ctx.replica_id());
    if (replica < pending_.size()) calls.swap(pending_[replica]);
  }
  // Every replica has read the moving variables once the all-reduce's first barrier has passed.
  return {replica_copy(*moving_mean_, &BatchStats::mean, calls), replica_copy(*moving_variance_, &BatchStats::variance, calls)};
}

void BatchNormalization::take_means(ReplicaContext& ctx, std::span<Tensor> means) {
  if (means.size() != 2) throw std::logic_error("BatchNormalization '" + name() + "': two means expected");
  if (!ctx.leads_process()) return;
  if (!moving_mean_->value().is_abstract()) {
    moving_mean_->mutable_value().copy_from(means[0]);
    moving_variance_->mutable_value().copy_from(means[1]);
  }
  std::lock_guard<std::mutex> lock(pending_mu_);
  pending_.clear();
  pending_replicas_ = 0;
}

nlohmann::json BatchNormalization::get_config() const {
  nlohmann::json config = Layer::get_config();
  // tf.keras stores the axis as given until build, then as a list of non-negative axes.
  config["axis"] = built() ? nlohmann::json::array({static_cast<int64_t>(input_shape().size())})
                           : nlohmann::json(options_.axis);
  config["momentum"] = decimal_value(options_.momentum);
  config["epsilon"] = decimal_value(options_.epsilon);
  config["center"] = options_.center;
  config["scale"] = options_.scale;
  config["beta_initializer"] = initializer_config(options_.beta_initializer);
  config["gamma_initializer"] = initializer_config(options_.gamma_initializer);
  config["moving_mean_initializer"] = initializer_config(options_.moving_mean_initializer);
  config["moving_variance_initializer"] = initializer_config(options_.moving_variance_initializer);
  config["beta_regularizer"] = nullptr;
  config["gamma_regularizer"] = nullptr;
  config["beta_constraint"] = nullptr;
  config["gamma_constraint"] = nullptr;
  return config;
}

}  // namespace layers

std::shared_ptr<layers::BatchNormalization> BatchNormalization(float momentum, float epsilon, std::string name) {
  layers::BatchNormalization::Options options;
  options.momentum = momentum;
  options.epsilon = epsilon;
  options.name = std::move(name);
  return std::make_shared<layers::BatchNormalization>(std::move(options));
}

std::shared_ptr<layers::BatchNormalization> BatchNormalization(layers::BatchNormalization::Options options) {
  return std::make_shared<layers::BatchNormalization>(std::move(options));
}

}  // namespace keel
