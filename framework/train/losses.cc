#include "framework/train/losses.h"

#include <stdexcept>

#include "framework/core/limits.h"
#include "framework/ops/ops.h"

namespace keel {

Tensor Loss::operator()(const Tensor& y_true, const Tensor& y_pred) const {
  return ops::reduce_mean(per_example(y_true, y_pred));
}

// When y_pred is a softmax output whose logits are known, Keras computes the loss from the logits:
// the same value, without the log of a clipped probability.
Tensor CategoricalCrossentropy::per_example(const Tensor& y_true, const Tensor& y_pred) const {
  if (from_logits_) return ops::softmax_cross_entropy_with_logits(y_true, y_pred);
  if (Tensor logits = y_pred.keras_logits(); logits.defined()) {
    return ops::softmax_cross_entropy_with_logits(y_true, logits);
  }
  return ops::categorical_crossentropy(y_true, y_pred);
}

nlohmann::json CategoricalCrossentropy::get_config() const {
  return {{"reduction", "auto"}, {"name", name()}, {"from_logits", from_logits_}, {"label_smoothing", 0.0},
          {"axis", -1}};
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

std::shared_ptr<Loss> make_loss(const std::string& name, bool from_logits) {
  if (name == "categorical_crossentropy") return std::make_shared<CategoricalCrossentropy>(from_logits);
  if (name == "sparse_categorical_crossentropy") return std::make_shared<SparseCategoricalCrossentropy>(from_logits);
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

}  // namespace keel
