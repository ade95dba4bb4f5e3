// Cross-entropy losses, per example: fused from logits (stable) and Keras's form on probabilities.
#include <cmath>

#include "framework/autodiff/tape.h"
#include "framework/ops/op_util.h"
#include "framework/ops/ops.h"

namespace keel::ops {
namespace {

constexpr float kKerasEpsilon = 1e-7f;  // keras.backend.epsilon()

void check_dense_labels(const char* op, const Tensor& labels, const Tensor& preds) {
  if (preds.rank() != 2 || labels.shape() != preds.shape()) {
    detail::shape_error(op, "labels " + shape_string(labels.shape()) + " and predictions " +
                                shape_string(preds.shape()) + " must both be (batch, classes)");
  }
}

void check_sparse_labels(const char* op, const Tensor& labels, const Tensor& preds) {
  if (preds.rank() != 2 || labels.rank() != 1 || labels.dim(0) != preds.dim(0)) {
    detail::shape_error(op, "labels " + shape_string(labels.shape()) + " must be (batch,) class ids for predictions " +
                                shape_string(preds.shape()));
  }
}

// Class ids arrive as floats; anything not an integer in [0, classes) is bad input, not a crash.
Eigen::VectorXi class_ids(const char* op, const Tensor& labels, int64_t classes) {
  Eigen::VectorXi ids(labels.size());
  const float* l = labels.data();
  for (int64_t i = 0; i < labels.size(); ++i) {
    const float v = l[i];
    if (!(v >= 0.0f) || v >= static_cast<float>(classes) || v != std::floor(v)) {
      throw std::invalid_argument(std::string(op) + ": label " + std::to_string(v) + " at index " +
                                  std::to_string(i) + " is not a class id in [0, " + std::to_string(classes) + ")");
    }
    ids[i] = static_cast<int>(v);
  }
  return ids;
}

// Softmax of (N, C) logits into `probs`, and per-row log-sum-exp into `lse`.
void softmax_and_lse(const Tensor& logits, Tensor& probs, Eigen::VectorXf& lse) {
  ConstMatrixMap z = logits.matrix();
  MatrixMap p = probs.matrix();
  const Eigen::VectorXf max = z.rowwise().maxCoeff();
  p.noalias() = z.colwise() - max;
  p = p.array().exp().matrix();
  const Eigen::VectorXf sum = p.rowwise().sum();
  p.array().colwise() /= sum.array();
  lse = max.array() + sum.array().log();
}

// d(loss_i)/d(logits) = dy_i * (softmax_i - labels_i); `probs` is reused as the result's input.
BackwardFn logits_backward(Tensor labels, Tensor probs, bool sparse) {
  return [labels, probs, sparse](const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
    std::vector<Tensor> grads(2);
    if (!needs[1]) return grads;
    Tensor dz = Tensor::empty(probs.shape());
    if (detail::compute(dz, {&dy[0], &probs})) {
      MatrixMap d = dz.matrix();
      d = probs.matrix();
      if (sparse) {
        const float* l = labels.data();
        for (int64_t i = 0; i < d.rows(); ++i) d(i, static_cast<int64_t>(l[i])) -= 1.0f;
      } else {
        d -= labels.matrix();
      }
      d.array().colwise() *= Eigen::Map<const Eigen::ArrayXf>(dy[0].data(), d.rows());
    }
    grads[1] = dz;
    return grads;
  };
}

Tensor from_logits(const char* op, const Tensor& labels, const Tensor& logits_in, bool sparse) {
  const Tensor logits = detail::operand(logits_in, DType::float32).value;  // float32, whatever came in
  Tensor loss = Tensor::empty({logits.dim(0)});
  Tensor probs = Tensor::empty(logits.shape());
  if (detail::compute(loss, {&labels, &logits})) {
    Eigen::VectorXf lse;
    softmax_and_lse(logits, probs, lse);
    ConstMatrixMap z = logits.matrix();
    float* out = loss.data();
    if (sparse) {
      const Eigen::VectorXi ids = class_ids(op, labels, logits.dim(1));
      for (int64_t i = 0; i < z.rows(); ++i) out[i] = lse[i] - z(i, ids[i]);
    } else {
      // -sum(y * log_softmax(z)) = sum(y) * lse - sum(y * z)
      ConstMatrixMap y = labels.matrix();
      const Eigen::VectorXf ysum = y.rowwise().sum();
      const Eigen::VectorXf yz = (y.array() * z.array()).rowwise().sum();
      Eigen::Map<Eigen::VectorXf>(out, z.rows()) = ysum.cwiseProduct(lse) - yz;
    }
  }
  if (GradientTape::is_recording({&logits_in})) {
    GradientTape::record({labels, logits_in}, {loss}, logits_backward(labels, probs, sparse));
  }
  return loss;
}

// Keras: p / sum(p), clipped to [eps, 1 - eps]. Returns the clipped, normalised probabilities.
MatrixRM keras_clip(ConstMatrixMap p) {
  MatrixRM q = p;
  q.array().colwise() /= q.array().rowwise().sum();
  return q.array().max(kKerasEpsilon).min(1.0f - kKerasEpsilon).matrix();
}

Tensor from_probs(const char* op, const Tensor& labels, const Tensor& probs_in, bool sparse) {
  const Tensor probs = detail::operand(probs_in, DType::float32).value;
  Tensor loss = Tensor::empty({probs.dim(0)});
  if (detail::compute(loss, {&labels, &probs})) {
    const MatrixRM q = keras_clip(probs.matrix());
    float* out = loss.data();
    if (sparse) {
      const Eigen::VectorXi ids = class_ids(op, labels, probs.dim(1));
      for (int64_t i = 0; i < q.rows(); ++i) out[i] = -std::log(q(i, ids[i]));
    } else {
      Eigen::Map<Eigen::VectorXf>(out, q.rows()) = -(labels.matrix().array() * q.array().log()).rowwise().sum();
    }
  }
  if (GradientTape::is_recording({&probs_in})) {
    GradientTape::record({labels, probs_in}, {loss}, [labels, probs, sparse](const std::vector<Tensor>& dy,
                                                                          const std::vector<bool>& needs) {
      std::vector<Tensor> grads(2);
      if (!needs[1]) return grads;
      Tensor dp = Tensor::empty(probs.shape());
      if (detail::compute(dp, {&dy[0], &probs})) {
        // loss = -sum_j y_j log clip(p_j / s), s = sum_k p_k. Through the clip, only unclipped q_j
        // pass gradient: d/dp_k = -(y_k/p_k)[k unclipped] + (1/s) * sum_{j unclipped} y_j.
        ConstMatrixMap p = probs.matrix();
        const int64_t rows = p.rows(), cols = p.cols();
        MatrixRM y(rows, cols);
        if (sparse) {
          y.setZero();
          const float* l = labels.data();
          for (int64_t i = 0; i < rows; ++i) y(i, static_cast<int64_t>(l[i])) = 1.0f;
        } else {
          y = labels.matrix();
        }
        const Eigen::VectorXf s = p.rowwise().sum();
        MatrixRM q = p;
        q.array().colwise() /= s.array();
        const auto unclipped = (q.array() > kKerasEpsilon) && (q.array() < 1.0f - kKerasEpsilon);
        const MatrixRM yu = unclipped.select(y.array(), 0.0f).matrix();
        const Eigen::VectorXf ysum = yu.rowwise().sum();
        MatrixMap d = dp.matrix();
        d = -(yu.array() / p.array().max(1e-30f)).matrix();
        d.array().colwise() += (ysum.array() / s.array());
        d.array().colwise() *= Eigen::Map<const Eigen::ArrayXf>(dy[0].data(), rows);
      }
      grads[1] = dp;
      return grads;
    });
  }
  return loss;
}

}  // namespace

Tensor softmax_cross_entropy_with_logits(const Tensor& labels, const Tensor& logits) {
  check_dense_labels("softmax_cross_entropy_with_logits", labels, logits);
  return from_logits("softmax_cross_entropy_with_logits", labels, logits, false);
}

Tensor sparse_softmax_cross_entropy_with_logits(const Tensor& labels, const Tensor& logits) {
  check_sparse_labels("sparse_softmax_cross_entropy_with_logits", labels, logits);
  return from_logits("sparse_softmax_cross_entropy_with_logits", labels, logits, true);
}

Tensor categorical_crossentropy(const Tensor& labels, const Tensor& probs) {
  check_dense_labels("categorical_crossentropy", labels, probs);
  return from_probs("categorical_crossentropy", labels, probs, false);
}

Tensor sparse_categorical_crossentropy(const Tensor& labels, const Tensor& probs) {
  check_sparse_labels("sparse_categorical_crossentropy", labels, probs);
  return from_probs("sparse_categorical_crossentropy", labels, probs, true);
}

}  // namespace keel::ops
