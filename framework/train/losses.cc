#include "framework/train/losses.h"

#include <stdexcept>

#include "framework/core/limits.h"
#include "framework/ops/ops.h"

namespace keel {

Tensor Loss::operator()(const Tensor& y_true, const Tensor& y_pred) const {
  return ops::reduce_mean(per_example(y_true, y_pred));
}

CategoricalCrossentropy::CategoricalCrossentropy(bool from_logits, float label_smoothing)
    : from_logits_(from_logits), label_smoothing_(label_smoothing) {
  if (!(label_smoothing >= 0.0f && label_smoothing <= 1.0f)) {
    throw std::invalid_argument("label_smoothing must be in [0, 1], got " + std::to_string(label_smoothing));
  }
}

namespace {

// Keras's categorical_crossentropy: y_true * (1 - s) + s / classes, in float32 (rows still sum to 1,
// which the cross-entropy's gradient assumes). A new tensor of the labels' shape: no gradient.
Tensor smoothed_labels(const Tensor& y_true, float s) {
  if (y_true.rank() < 1) {
    throw std::invalid_argument("categorical_crossentropy: labels must be one-hot rows (batch, classes), got " +
                                shape_string(y_true.shape()));
  }
  Tensor y = Tensor::empty(y_true.shape());
  if (y.is_abstract()) return y;
  if (y_true.is_abstract()) throw std::logic_error("categorical_crossentropy: abstract labels outside an abstract context");
  if (y_true.size() == 0) return y;
  const float keep = 1.0f - s;
  const float spread = s / static_cast<float>(y_true.shape().back());
  const float* in = y_true.data();
  float* out = y.data();
  for (int64_t i = 0; i < y_true.size(); ++i) out[i] = in[i] * keep + spread;
  return y;
}

}  // namespace

// When y_pred is a softmax output whose logits are known, Keras computes the loss from the logits:
// the same value, without the log of a clipped probability.
Tensor CategoricalCrossentropy::per_example(const Tensor& y_true, const Tensor& y_pred) const {
  const Tensor y = label_smoothing_ > 0.0f ? smoothed_labels(y_true, label_smoothing_) : y_true;
  if (from_logits_) return ops::softmax_cross_entropy_with_logits(y, y_pred);
  if (Tensor logits = y_pred.keras_logits(); logits.defined()) {
    return ops::softmax_cross_entropy_with_logits(y, logits);
  }
  return ops::categorical_crossentropy(y, y_pred);
}

nlohmann::json CategoricalCrossentropy::get_config() const {
  return {{"reduction", "auto"}, {"name", name()}, {"from_logits", from_logits_},
          {"label_smoothing", label_smoothing_}, {"axis", -1}};
}

Tensor SparseCategoricalCrossentropy::per_example(const Tensor& y_true, const Tensor& y_pred) const {
  if (from_logits_) return ops::sparse_softmax_cross_entropy_with_logits(y_true, y_pred);
  if (Tensor logits = y_pred.keras_logits(); logits.defined()) {
    return ops::sparse_softmax_cross_entropy_with_logits(y_true, logits);
  }
  return ops::sparse_categorical_crossentropy(y_true, y_pred);
}

nlohmann::json SparseCategoricalCrossentropy::get_config() const {
  return {{"reduction", "auto"}, {"name", name()}, {"from_logits", from_logits_}, {"ignore_class", nullptr}};
}

std::shared_ptr<Loss> make_loss(const std::string& name, bool from_logits, float label_smoothing) {
  if (name == "categorical_crossentropy") return std::make_shared<CategoricalCrossentropy>(from_logits, label_smoothing);
  if (name == "sparse_categorical_crossentropy") {
    if (label_smoothing != 0.0f) {
      throw std::invalid_argument("label smoothing needs one-hot labels: use categorical_crossentropy (Keras's "
                                  "sparse_categorical_crossentropy has no label_smoothing)");
    }
    return std::make_shared<SparseCategoricalCrossentropy>(from_logits);
  }
  throw std::invalid_argument("unknown loss '" + quote_untrusted(name) +
                              "' (known: categorical_crossentropy, sparse_categorical_crossentropy)");
}

int64_t count_correct(const Tensor& y_true, const Tensor& y_pred, bool sparse_labels) {
  if (y_pred.is_abstract() || y_true.is_abstract() || y_pred.size() == 0) return 0;
  ConstMatrixMap p = y_pred.matrix();
  int64_t correct = 0;
  for (int64_t i = 0; i < p.rows(); ++i) {
    Eigen::Index predicted = 0;
    p.row(i).maxCoeff(&predicted);
    Eigen::Index label = 0;
    if (sparse_labels) {
      label = static_cast<Eigen::Index>(y_true.data()[i]);
    } else {
      y_true.matrix().row(i).maxCoeff(&label);
    }
    correct += predicted == label ? 1 : 0;
  }
  return correct;
}

int64_t count_in_top_k(const Tensor& y_true, const Tensor& y_pred, bool sparse_labels, int k) {
  if (y_pred.is_abstract() || y_true.is_abstract() || y_pred.size() == 0) return 0;
  ConstMatrixMap p = y_pred.matrix();
  int64_t in_top_k = 0;
  for (int64_t i = 0; i < p.rows(); ++i) {
    Eigen::Index label = 0;
    if (sparse_labels) {
      label = static_cast<Eigen::Index>(y_true.data()[i]);
    } else {
      y_true.matrix().row(i).maxCoeff(&label);
    }
    if (label < 0 || label >= p.cols() || !p.row(i).allFinite()) continue;
    const float target = p(i, label);
    const int64_t higher = (p.row(i).array() > target).count();
    in_top_k += higher < k ? 1 : 0;
  }
  return in_top_k;
}

}  // namespace keel
