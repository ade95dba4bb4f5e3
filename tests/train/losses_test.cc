#include "framework/train/losses.h"

#include <cmath>
#include <memory>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "framework/autodiff/tape.h"
#include "framework/layers/core_layers.h"
#include "framework/ops/ops.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using testing::expect_gradients_match;
using testing::host;
using testing::random_host;
using testing::tolerances;

TEST(CategoricalCrossentropyLossTest, MeanOverTheBatchOfPerExampleLosses) {
  CategoricalCrossentropy loss;
  Tensor y = host({2, 2}, {1, 0, 0, 1});
  Tensor p = host({2, 2}, {0.25f, 0.75f, 0.25f, 0.75f});
  const std::vector<float> per = loss.per_example(y, p).to_vector();
  EXPECT_NEAR(per[0], std::log(4.0), 1e-6);
  EXPECT_NEAR(per[1], std::log(4.0 / 3.0), 1e-6);
  Tensor mean = loss(y, p);
  EXPECT_EQ(mean.shape(), Shape{});
  EXPECT_NEAR(mean.item(), (std::log(4.0) + std::log(4.0 / 3.0)) / 2, 1e-6);
}

TEST(CategoricalCrossentropyLossTest, UsesTheLogitsOfASoftmaxOutput) {
  // With logits (0, 40) and label 0, p_0 = e^-40 is far below Keras's clip at 1e-7: the clipped
  // form gives -log(1e-7) ≈ 16.1, the fused form from the logits the true 40.
  Tensor logits = host({1, 2}, {0, 40});
  Tensor y = host({1, 2}, {1, 0});
  Tensor probs = layers::apply_activation("softmax", logits);
  ASSERT_TRUE(probs.keras_logits().defined());
  CategoricalCrossentropy loss;
  EXPECT_NEAR(loss(y, probs).item(), 40.0, 1e-4);
  // The same probabilities without their logits: Keras's clipped form.
  Tensor bare = host({1, 2}, probs.to_vector());
  EXPECT_NEAR(loss(y, bare).item(), -std::log(1e-7), 1e-3);
}

TEST(CategoricalCrossentropyLossTest, GradientThroughSoftmaxOutputFlowsToTheLogits) {
  // loss(y, softmax(z)) differentiated w.r.t. z, through the fused path: softmax - y, / batch.
  auto opts = tolerances("CategoricalCrossentropy(softmax)", 1e-3, 1e-5, 1e-2);
  opts.check_inputs = {1};
  expect_gradients_match(
      [](const std::vector<Tensor>& in) {
        return CategoricalCrossentropy()(in[0], layers::apply_activation("softmax", in[1]));
      },
      {host({3, 3}, {1, 0, 0, 0, 0, 1, 0, 1, 0}), random_host({3, 3}, -2, 2, 201)}, opts);
}

TEST(CategoricalCrossentropyLossTest, FromLogits) {
  CategoricalCrossentropy loss(/*from_logits=*/true);
  Tensor z = host({1, 2}, {0, std::log(3.0f)});
  EXPECT_NEAR(loss(host({1, 2}, {0, 1}), z).item(), std::log(4.0 / 3.0), 1e-6);
  EXPECT_EQ(loss.get_config()["from_logits"], true);
}

// Keras's label_smoothing: y (1 - s) + s / classes, then the cross-entropy. Checked against
// PyTorch's definition of the same loss (F.cross_entropy(label_smoothing=s): (1 - s) times the
// cross-entropy of the true class plus s times the mean over classes of -log p), in double.
TEST(CategoricalCrossentropyLossTest, LabelSmoothingAsKerasAndPyTorchDefineIt) {
  const double s = 0.3;
  const std::vector<double> z = {1.0, 2.0, 3.5};
  double norm = 0;
  for (double v : z) norm += std::exp(v);
  std::vector<double> neg_log_p;
  for (double v : z) neg_log_p.push_back(std::log(norm) - v);
  const double expected = (1 - s) * neg_log_p[1] + s * (neg_log_p[0] + neg_log_p[1] + neg_log_p[2]) / 3;
  const Tensor y = host({1, 3}, {0, 1, 0});
  const Tensor logits = host({1, 3}, {1.0f, 2.0f, 3.5f});
  const CategoricalCrossentropy smoothing(/*from_logits=*/false, 0.3f);
  EXPECT_NEAR(smoothing(y, layers::apply_activation("softmax", logits)).item(), expected, 1e-5);
  EXPECT_NEAR(CategoricalCrossentropy(/*from_logits=*/true, 0.3f)(y, logits).item(), expected, 1e-5);
  const Tensor probs = host({1, 3}, layers::apply_activation("softmax", logits).to_vector());  // no logits: clipped form
  EXPECT_NEAR(smoothing(y, probs).item(), expected, 1e-5);
  // The same bits as the plain loss on labels smoothed beforehand, in float32 as Keras smooths them.
  const float keep = 1.0f - 0.3f, spread = 0.3f / 3.0f;
  const Tensor smoothed = host({1, 3}, {0 * keep + spread, 1 * keep + spread, 0 * keep + spread});
  EXPECT_EQ(smoothing(y, probs).item(), CategoricalCrossentropy()(smoothed, probs).item());
  EXPECT_FLOAT_EQ(smoothing.get_config()["label_smoothing"].get<float>(), 0.3f);
  EXPECT_EQ(CategoricalCrossentropy().get_config()["label_smoothing"], 0.0);
  EXPECT_THROW(CategoricalCrossentropy(false, 1.5f), std::invalid_argument);
  EXPECT_THROW(CategoricalCrossentropy(false, std::nanf("")), std::invalid_argument);
  EXPECT_THROW(make_loss("sparse_categorical_crossentropy", false, 0.1f), std::invalid_argument);
  EXPECT_FLOAT_EQ(std::static_pointer_cast<CategoricalCrossentropy>(make_loss("categorical_crossentropy", false, 0.1f))
                      ->label_smoothing(),
                  0.1f);
}

TEST(CategoricalCrossentropyLossTest, LabelSmoothingGradientFlowsToTheLogits) {
  auto opts = tolerances("CategoricalCrossentropy(softmax, label_smoothing=0.2)", 1e-3, 1e-5, 1e-2);
  opts.check_inputs = {1};
  expect_gradients_match(
      [](const std::vector<Tensor>& in) {
        return CategoricalCrossentropy(false, 0.2f)(in[0], layers::apply_activation("softmax", in[1]));
      },
      {host({3, 3}, {1, 0, 0, 0, 0, 1, 0, 1, 0}), random_host({3, 3}, -2, 2, 202)}, opts);
}

TEST(SparseCategoricalCrossentropyLossTest, ValuesAndFusedPath) {
  SparseCategoricalCrossentropy loss;
  EXPECT_TRUE(loss.sparse_labels());
  Tensor probs = host({2, 2}, {0.25f, 0.75f, 0.5f, 0.5f});
  EXPECT_NEAR(loss(host({2}, {0, 1}), probs).item(), (std::log(4.0) + std::log(2.0)) / 2, 1e-6);
  Tensor from_softmax = layers::apply_activation("softmax", host({1, 2}, {0, 40}));
  EXPECT_NEAR(loss(host({1}, {0}), from_softmax).item(), 40.0, 1e-4);
  EXPECT_NEAR(SparseCategoricalCrossentropy(true)(host({1}, {1}), host({1, 2}, {0, std::log(3.0f)})).item(),
              std::log(4.0 / 3.0), 1e-6);
  EXPECT_THROW(loss(host({2}, {0, 2}), probs), std::invalid_argument);
}

TEST(LossTest, MakeLossAndConfigs) {
  std::shared_ptr<Loss> cce = make_loss("categorical_crossentropy");
  EXPECT_EQ(cce->name(), "categorical_crossentropy");
  EXPECT_FALSE(cce->sparse_labels());
  EXPECT_EQ(cce->get_config()["from_logits"], false);
  EXPECT_EQ(cce->get_config()["name"], "categorical_crossentropy");
  std::shared_ptr<Loss> scce = make_loss("sparse_categorical_crossentropy", true);
  EXPECT_EQ(scce->name(), "sparse_categorical_crossentropy");
  EXPECT_TRUE(scce->sparse_labels());
  EXPECT_EQ(scce->get_config()["from_logits"], true);
  EXPECT_THROW(make_loss("mse"), std::invalid_argument);
}

TEST(CountCorrectTest, DenseAndSparseLabels) {
  Tensor pred = host({4, 3}, {0.1f, 0.8f, 0.1f,  0.6f, 0.3f, 0.1f,  0.2f, 0.2f, 0.6f,  0.3f, 0.4f, 0.3f});
  // argmax: 1, 0, 2, 1
  EXPECT_EQ(count_correct(host({4}, {1, 0, 0, 1}), pred, /*sparse_labels=*/true), 3);
  EXPECT_EQ(count_correct(host({4, 3}, {0, 1, 0, 1, 0, 0, 1, 0, 0, 0, 0, 1}), pred, false), 2);
}

// tf.math.in_top_k: a label is in the top k when fewer than k classes score strictly higher; ties at
// the boundary count as in; a row with a non-finite prediction never is.
TEST(CountInTopKTest, StrictlyHigherClassesDecideAndTiesCountAsIn) {
  Tensor pred = host({4, 4}, {0.1f, 0.4f, 0.3f, 0.2f,  0.25f, 0.25f, 0.25f, 0.25f,  0.7f, 0.1f, 0.1f, 0.1f,
                              NAN, 0.5f, 0.2f, 0.3f});
  const Tensor sparse = host({4}, {3, 2, 1, 1});
  // Row 0: label 3 (0.2) has two higher (0.4, 0.3): in the top 3, not the top 2. Row 1: all tied,
  // in at any k. Row 2: label 1 (0.1) has one higher: in the top 2. Row 3: NaN, never.
  EXPECT_EQ(count_in_top_k(sparse, pred, /*sparse_labels=*/true, 1), 1);
  EXPECT_EQ(count_in_top_k(sparse, pred, true, 2), 2);
  EXPECT_EQ(count_in_top_k(sparse, pred, true, 3), 3);
  EXPECT_EQ(count_in_top_k(sparse, pred, true, 5), 3);
  const Tensor one_hot = host({4, 4}, {0, 0, 0, 1,  0, 0, 1, 0,  0, 1, 0, 0,  0, 1, 0, 0});
  EXPECT_EQ(count_in_top_k(one_hot, pred, false, 2), 2);
}

}  // namespace
}  // namespace keel
