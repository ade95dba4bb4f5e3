// Keras losses. A loss returns the per-example values; calling it reduces with Keras's default
// SUM_OVER_BATCH_SIZE (the mean over the batch — over each replica's shard under a strategy).
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "framework/core/tensor.h"

namespace keel {

class Loss {
 public:
  virtual ~Loss() = default;
  virtual std::string name() const = 0;
  virtual Tensor per_example(const Tensor& y_true, const Tensor& y_pred) const = 0;  // (batch,)
  Tensor operator()(const Tensor& y_true, const Tensor& y_pred) const;               // scalar mean
  virtual nlohmann::json get_config() const = 0;
  // "sparse" labels are class ids (batch,); otherwise one-hot (batch, classes).
  virtual bool sparse_labels() const = 0;
};

// label_smoothing (Keras's, in [0, 1]): the one-hot labels become y (1 - label_smoothing) +
// label_smoothing / classes before the cross-entropy (std::invalid_argument outside [0, 1]).
class CategoricalCrossentropy : public Loss {
 public:
  explicit CategoricalCrossentropy(bool from_logits = false, float label_smoothing = 0.0f);
  std::string name() const override { return "categorical_crossentropy"; }
  Tensor per_example(const Tensor& y_true, const Tensor& y_pred) const override;
  nlohmann::json get_config() const override;
  bool sparse_labels() const override { return false; }
  float label_smoothing() const { return label_smoothing_; }

 private:
  bool from_logits_;
  float label_smoothing_;
};

class SparseCategoricalCrossentropy : public Loss {
 public:
  explicit SparseCategoricalCrossentropy(bool from_logits = false) : from_logits_(from_logits) {}
  std::string name() const override { return "sparse_categorical_crossentropy"; }
  Tensor per_example(const Tensor& y_true, const Tensor& y_pred) const override;
  nlohmann::json get_config() const override;
  bool sparse_labels() const override { return true; }

 private:
  bool from_logits_;
};

// "categorical_crossentropy" | "sparse_categorical_crossentropy"; std::invalid_argument otherwise,
// and for label smoothing with the sparse loss (Keras's has none: its labels are class ids).
std::shared_ptr<Loss> make_loss(const std::string& name, bool from_logits = false, float label_smoothing = 0.0f);

// Number of rows whose argmax prediction equals the label (class id, or argmax of one-hot labels):
// Keras's (sparse_)categorical_accuracy, summed rather than averaged so replicas can be combined.
int64_t count_correct(const Tensor& y_true, const Tensor& y_pred, bool sparse_labels);

// Number of rows whose label is among the k highest predictions: Keras's (sparse_)top_k_categorical_
// accuracy, summed. As tf.math.in_top_k, a label is in the top k when fewer than k classes score
// strictly higher than it (ties at the boundary count as in); a non-finite prediction never is.
int64_t count_in_top_k(const Tensor& y_true, const Tensor& y_pred, bool sparse_labels, int k);

}  // namespace keel
