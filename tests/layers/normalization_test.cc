// BatchNormalization: weights and config as Keras has them, training and inference forward, the
// moving-average update (Keras's formula, one replica and several, against PyTorch via
// tests/golden/bn_small.json), and planning against the real run.
#include "framework/layers/normalization.h"

#include <array>
#include <cmath>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "framework/autodiff/tape.h"
#include "framework/device/replica_context.h"
#include "framework/device/strategy.h"
#include "framework/layers/core_layers.h"
#include "framework/ops/ops.h"
#include "tests/support/golden.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using nlohmann::json;
using testing::host;
using testing::random_host;

// Per-channel mean and biased variance of x viewed as (rows, C), in double.
struct Moments {
  std::vector<double> mean, variance;
};
Moments moments_by_hand(const std::vector<float>& x, size_t channels) {
  const size_t rows = x.size() / channels;
  Moments m{std::vector<double>(channels, 0.0), std::vector<double>(channels, 0.0)};
  for (size_t i = 0; i < x.size(); ++i) m.mean[i % channels] += x[i];
  for (double& v : m.mean) v /= static_cast<double>(rows);
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = x[i] - m.mean[i % channels];
    m.variance[i % channels] += d * d;
  }
  for (double& v : m.variance) v /= static_cast<double>(rows);
  return m;
}

// Keras's assign_moving_average: moving - (moving - value) * (1 - momentum).
double keras_update(double moving, double value, double momentum) { return moving - (moving - value) * (1 - momentum); }

void expect_norm_near_all(const std::vector<float>& got, const std::vector<double>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << what << " element " << i;
}

// --- weights and config ---

TEST(BatchNormalizationTest, WeightsAreNamedOrderedAndInitialisedAsInKeras) {
  clear_session();
  auto bn = BatchNormalization();
  EXPECT_EQ(bn->name(), "batch_normalization");
  EXPECT_EQ(BatchNormalization()->name(), "batch_normalization_1");
  bn->build({4, 4, 3});
  const std::vector<Variable*> w = bn->weights();
  ASSERT_EQ(w.size(), 4u);
  const std::array<const char*, 4> names = {"batch_normalization/gamma", "batch_normalization/beta",
                                            "batch_normalization/moving_mean", "batch_normalization/moving_variance"};
  const std::array<bool, 4> trainable = {true, true, false, false};
  const std::array<float, 4> initial = {1, 0, 0, 1};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(w[i]->name(), names[i]);
    EXPECT_EQ(w[i]->shape(), (Shape{3})) << names[i];
    EXPECT_EQ(w[i]->trainable(), trainable[i]) << names[i];
    EXPECT_EQ(w[i]->value().is_trainable_variable(), trainable[i]) << names[i];
    EXPECT_EQ(w[i]->value().to_vector(), std::vector<float>(3, initial[i])) << names[i];
  }
  EXPECT_EQ(bn->trainable_weights().size(), 2u);
  EXPECT_EQ(bn->non_trainable_weights().size(), 2u);
  EXPECT_EQ(bn->gamma(), w[0]);
  EXPECT_EQ(bn->beta(), w[1]);
  EXPECT_EQ(bn->moving_mean(), w[2]);
  EXPECT_EQ(bn->moving_variance(), w[3]);
  EXPECT_EQ(bn->count_params(), 12);
}

TEST(BatchNormalizationTest, WithoutCenterAndScaleOnlyTheMovingStatisticsExist) {
  layers::BatchNormalization::Options o;
  o.center = false;
  o.scale = false;
  o.name = "bn";
  auto bn = BatchNormalization(o);
  Tensor x = random_host({6, 2}, -3, 3, 301);
  Tensor y = (*bn)(x, /*training=*/true);
  ASSERT_EQ(bn->weights().size(), 2u);
  EXPECT_EQ(bn->weights()[0]->name(), "bn/moving_mean");
  EXPECT_EQ(bn->weights()[1]->name(), "bn/moving_variance");
  EXPECT_EQ(bn->gamma(), nullptr);
  EXPECT_EQ(bn->beta(), nullptr);
  const Moments m = moments_by_hand(x.to_vector(), 2);
  std::vector<double> want;
  const std::vector<float> xv = x.to_vector();
  for (size_t i = 0; i < xv.size(); ++i) want.push_back((xv[i] - m.mean[i % 2]) / std::sqrt(m.variance[i % 2] + 1e-3));
  expect_norm_near_all(y.to_vector(), want, 1e-5, "y");
}

TEST(BatchNormalizationTest, GetConfigHasKerasKeys) {
  auto bn = BatchNormalization(0.9f, 1e-5f, "bn");
  json before = bn->get_config();
  EXPECT_EQ(before.at("axis"), -1) << "as given, until build";
  bn->build({5, 5, 8});
  json c = bn->get_config();
  EXPECT_EQ(c.at("name"), "bn");
  EXPECT_EQ(c.at("trainable"), true);
  EXPECT_EQ(c.at("dtype"), "float32");
  EXPECT_EQ(c.at("axis"), json::array({3})) << "tf.keras normalises the axis to a list after build";
  EXPECT_EQ(c.at("momentum").get<double>(), 0.9) << "the decimal the user wrote, not float 0.9's expansion";
  EXPECT_EQ(c.at("epsilon").get<double>(), 1e-5);
  EXPECT_EQ(c.at("center"), true);
  EXPECT_EQ(c.at("scale"), true);
  EXPECT_EQ(c.at("beta_initializer"), json({{"class_name", "Zeros"}, {"config", json::object()}}));
  EXPECT_EQ(c.at("gamma_initializer"), json({{"class_name", "Ones"}, {"config", json::object()}}));
  EXPECT_EQ(c.at("moving_mean_initializer"), json({{"class_name", "Zeros"}, {"config", json::object()}}));
  EXPECT_EQ(c.at("moving_variance_initializer"), json({{"class_name", "Ones"}, {"config", json::object()}}));
  for (const char* k : {"beta_regularizer", "gamma_regularizer", "beta_constraint", "gamma_constraint"}) {
    EXPECT_TRUE(c.at(k).is_null()) << k;
  }
  EXPECT_EQ(BatchNormalization()->get_config().at("momentum").get<double>(), 0.99);
  EXPECT_EQ(BatchNormalization()->get_config().at("epsilon").get<double>(), 0.001);
}

TEST(BatchNormalizationTest, RejectsOtherAxesAndUnknownInitializers) {
  layers::BatchNormalization::Options o;
  o.axis = 1;
  auto bn = BatchNormalization(o);
  EXPECT_THROW(bn->build({4, 4, 3}), std::invalid_argument) << "axis 1 of NHWC is H";
  o.axis = 3;
  EXPECT_NO_THROW(BatchNormalization(o)->build({4, 4, 3})) << "axis 3 of NHWC is the channels";
  o.axis = -2;
  EXPECT_THROW(BatchNormalization(o), std::invalid_argument);
  layers::BatchNormalization::Options bad;
  bad.gamma_initializer = "twos";
  EXPECT_THROW(BatchNormalization(bad), std::invalid_argument);
  auto built = BatchNormalization();
  built->build({3});
  EXPECT_THROW((*built)(Tensor::zeros({2, 4}), true), std::invalid_argument);
}

// --- forward ---

TEST(BatchNormalizationTest, TrainingNormalisesWithBatchStatisticsAndUpdatesOutsideAReplicaAtOnce) {
  auto bn = BatchNormalization(0.9f, 1e-3f, "bn");
  Tensor x = random_host({4, 2, 2, 3}, -2, 4, 302);
  bn->build({2, 2, 3});
  bn->gamma()->assign(host({3}, {1.5f, 0.5f, 2.0f}));
  bn->beta()->assign(host({3}, {0.1f, -0.2f, 0.3f}));
  Tensor y = (*bn)(x, /*training=*/true);
  const Moments m = moments_by_hand(x.to_vector(), 3);
  const std::vector<float> xv = x.to_vector();
  const std::vector<double> g = {1.5, 0.5, 2.0}, b = {0.1, -0.2, 0.3};
  std::vector<double> want;
  for (size_t i = 0; i < xv.size(); ++i) {
    const size_t c = i % 3;
    want.push_back(g[c] * (xv[i] - m.mean[c]) / std::sqrt(m.variance[c] + 1e-3) + b[c]);
  }
  expect_norm_near_all(y.to_vector(), want, 2e-5, "y");
  // Outside strategy.run there is one replica: the update is applied by the call (Keras eager).
  std::vector<double> want_mean, want_var;
  for (size_t c = 0; c < 3; ++c) {
    want_mean.push_back(keras_update(0.0, m.mean[c], 0.9));
    want_var.push_back(keras_update(1.0, m.variance[c], 0.9));  // biased variance, as Keras
  }
  expect_norm_near_all(bn->moving_mean()->value().to_vector(), want_mean, 1e-6, "moving_mean");
  expect_norm_near_all(bn->moving_variance()->value().to_vector(), want_var, 1e-6, "moving_variance");
}

TEST(BatchNormalizationTest, TwoTrainingCallsInOneStepAreAppliedInOrder) {
  auto bn = BatchNormalization(0.5f, 1e-3f, "bn");
  Tensor a = host({2, 1}, {1, 3}), b = host({2, 1}, {10, 14});  // means 2, 12; variances 1, 4
  (*bn)(a, true);
  (*bn)(b, true);
  EXPECT_NEAR(bn->moving_mean()->value().item(), keras_update(keras_update(0, 2, 0.5), 12, 0.5), 1e-6);
  EXPECT_NEAR(bn->moving_variance()->value().item(), keras_update(keras_update(1, 1, 0.5), 4, 0.5), 1e-6);
}

TEST(BatchNormalizationTest, InferenceUsesTheMovingStatistics) {
  auto bn = BatchNormalization(0.99f, 1e-3f, "bn");
  bn->build({3});
  bn->gamma()->assign(host({3}, {2, 1, 0.5f}));
  bn->beta()->assign(host({3}, {0, 1, -1}));
  bn->moving_mean()->assign(host({3}, {1, -2, 0.5f}));
  bn->moving_variance()->assign(host({3}, {4, 0.25f, 1}));
  Tensor x = random_host({5, 3}, -3, 3, 303);
  Tensor y = (*bn)(x, /*training=*/false);
  const std::vector<float> xv = x.to_vector();
  const std::vector<double> g = {2, 1, 0.5}, b = {0, 1, -1}, mm = {1, -2, 0.5}, mv = {4, 0.25, 1};
  std::vector<double> want;
  for (size_t i = 0; i < xv.size(); ++i) {
    const size_t c = i % 3;
    want.push_back(g[c] * (xv[i] - mm[c]) / std::sqrt(mv[c] + 1e-3) + b[c]);
  }
  expect_norm_near_all(y.to_vector(), want, 1e-5, "y");
  EXPECT_EQ(bn->moving_mean()->value().to_vector(), (std::vector<float>{1, -2, 0.5f})) << "inference updates nothing";
}

TEST(BatchNormalizationTest, GradientsReachGammaAndBetaButNotTheMovingStatistics) {
  auto bn = BatchNormalization(0.99f, 1e-3f, "bn");
  Tensor x = random_host({6, 2}, -1, 1, 304);
  for (bool training : {true, false}) {
    GradientTape tape;
    Tensor y = (*bn)(x, training);
    Tensor loss = ops::reduce_sum(ops::relu(y));
    std::vector<Tensor> g = tape.gradient(loss, bn->weights());
    ASSERT_EQ(g.size(), 4u);
    EXPECT_TRUE(g[0].defined()) << "gamma, training " << training;
    EXPECT_TRUE(g[1].defined()) << "beta, training " << training;
    EXPECT_FALSE(g[2].defined()) << "moving_mean, training " << training;
    EXPECT_FALSE(g[3].defined()) << "moving_variance, training " << training;
  }
}

// --- replicas ---

// Builds `bn` mirrored on `s`, then runs one training step's forward and backward pass per replica
// inside strategy.run (as Model's step does, each replica on its own shard of `global`); the moving
// statistics are combined when the run ends. `seen[r]` gets replica r's view of moving_mean right
// after its own forward pass.
void replicated_training_step(ReplicatedStrategy& s, layers::BatchNormalization& bn, const Tensor& global,
                              std::vector<std::vector<float>>* seen = nullptr) {
  {
    auto scope = s.scope();
    bn.build(Shape(global.shape().begin() + 1, global.shape().end()));
  }
  if (seen != nullptr) seen->assign(static_cast<size_t>(s.num_replicas()), {});
  s.run_replicas([&](ReplicaContext& ctx) {
    const Batch shard = s.infeed(Batch{global, Tensor()}, ctx.replica_id());
    GradientTape tape;
    Tensor y = bn(shard.images, /*training=*/true);
    tape.gradient(ops::reduce_sum(ops::relu(y)), bn.trainable_weights());
    if (seen != nullptr) (*seen)[static_cast<size_t>(ctx.replica_id())] = bn.moving_mean()->value().to_vector();
  });
}

TEST(BatchNormalizationReplicaTest, ReplicasDoNotWriteTheMirroredStatisticsBeforeTheStepEnds) {
  ReplicatedStrategy s(DeviceSpec::custom(2, 0));
  auto bn = BatchNormalization(0.9f, 1e-3f, "bn");
  std::vector<std::vector<float>> seen;
  replicated_training_step(s, *bn, random_host({4, 3}, -1, 1, 311), &seen);
  for (const std::vector<float>& v : seen) EXPECT_EQ(v, std::vector<float>(3, 0.0f));
  EXPECT_NE(bn->moving_mean()->value().to_vector(), std::vector<float>(3, 0.0f)) << "combined when the run ended";
}

TEST(BatchNormalizationReplicaTest, ForEachReplicaCannotTrainIt) {
  // for_each_replica's bodies cannot meet to combine statistics: training there is a bug in keel.
  ReplicatedStrategy s(DeviceSpec::custom(2, 0));
  auto bn = BatchNormalization(0.9f, 1e-3f, "bn");
  {
    auto scope = s.scope();
    bn->build({3});
  }
  EXPECT_THROW(s.for_each_replica([&](int) { (*bn)(Tensor::full({2, 3}, 1.0f), /*training=*/true); }),
               std::logic_error);
}

TEST(BatchNormalizationReplicaTest, MovingStatisticsAreTheMeanOfPerReplicaKerasUpdates) {
  ReplicatedStrategy s(DeviceSpec::custom(2, 0));
  auto bn = BatchNormalization(0.9f, 1e-3f, "bn");
  const std::vector<Tensor> steps = {random_host({6, 2, 2}, -1, 3, 312), random_host({6, 2, 2}, 0, 5, 313)};
  // Reference: each replica keeps its own copy (TF's ON_READ variable), read as their mean.
  std::vector<std::vector<double>> copy_mean(2, std::vector<double>(2, 0.0)), copy_var(2, std::vector<double>(2, 1.0));
  for (const Tensor& global : steps) {
    replicated_training_step(s, *bn, global);
    const std::vector<float> v = global.to_vector();
    for (int r = 0; r < 2; ++r) {
      const Moments m = moments_by_hand(std::vector<float>(v.begin() + r * 12, v.begin() + (r + 1) * 12), 2);
      for (size_t c = 0; c < 2; ++c) {
        copy_mean[r][c] = keras_update(copy_mean[r][c], m.mean[c], 0.9);
        copy_var[r][c] = keras_update(copy_var[r][c], m.variance[c], 0.9);
      }
    }
    std::vector<double> want_mean(2), want_var(2);
    for (size_t c = 0; c < 2; ++c) {
      want_mean[c] = (copy_mean[0][c] + copy_mean[1][c]) / 2;
      want_var[c] = (copy_var[0][c] + copy_var[1][c]) / 2;
    }
    expect_norm_near_all(bn->moving_mean()->value().to_vector(), want_mean, 1e-6, "moving_mean");
    expect_norm_near_all(bn->moving_variance()->value().to_vector(), want_var, 1e-6, "moving_variance");
  }
}

TEST(BatchNormalizationReplicaTest, StatisticsArePerReplicaNotOfTheGlobalBatch) {
  // TPUStrategy's default: each replica normalises with, and feeds the moving variance, its own
  // shard's statistics. Shards with different means make the difference visible in the variance.
  ReplicatedStrategy s(DeviceSpec::custom(2, 0));
  auto bn = BatchNormalization(0.9f, 1e-3f, "bn");
  Tensor global = host({4, 1}, {0, 2, 10, 12});  // shards {0, 2} and {10, 12}: variances 1; global 26
  replicated_training_step(s, *bn, global);
  EXPECT_NEAR(bn->moving_variance()->value().item(), keras_update(1, 1, 0.9), 1e-6);
  EXPECT_NEAR(bn->moving_mean()->value().item(), keras_update(0, 6, 0.9), 1e-6);
}

TEST(BatchNormalizationReplicaTest, AReplicaWithAnEmptyShardKeepsItsCopy) {
  // 3 rows over 4 replicas: shards of 1, 1, 1 and 0 rows. Replica 3's copy is not updated (Keras
  // skips empty batches), and still counts in the mean.
  ReplicatedStrategy s(DeviceSpec::custom(4, 0));
  auto bn = BatchNormalization(0.5f, 1e-3f, "bn");
  replicated_training_step(s, *bn, host({3, 1}, {2, 4, 9}));
  // Each one-row shard has mean x and variance 0.
  const double want_mean = (keras_update(0, 2, 0.5) + keras_update(0, 4, 0.5) + keras_update(0, 9, 0.5) + 0) / 4;
  const double want_var = (3 * keras_update(1, 0, 0.5) + 1) / 4;
  EXPECT_NEAR(bn->moving_mean()->value().item(), want_mean, 1e-6);
  EXPECT_NEAR(bn->moving_variance()->value().item(), want_var, 1e-6);
}

TEST(BatchNormalizationReplicaTest, UpdateIsDeterministicAcrossRuns) {
  std::vector<float> first;
  for (int run = 0; run < 5; ++run) {
    ReplicatedStrategy s(DeviceSpec::custom(4, 0));
    auto bn = BatchNormalization(0.99f, 1e-3f, "bn");
    replicated_training_step(s, *bn, random_host({8, 16}, -3, 3, 314));
    std::vector<float> v = bn->moving_mean()->value().to_vector();
    for (float f : bn->moving_variance()->value().to_vector()) v.push_back(f);
    if (run == 0) first = v;
    EXPECT_EQ(v, first) << "run " << run;
  }
}

// --- planning ---

struct StepLedger {
  std::vector<std::array<MemoryStat, kNumCategories>> per_core;
};

StepLedger ledger_of_replicated_step(bool abstract) {
  ReplicatedStrategy s(DeviceSpec::custom(2, 0), ReplicatedStrategy::Options{abstract, 0});
  auto bn = BatchNormalization(0.99f, 1e-3f, "bn");
  Tensor global;
  {
    ContextScope host_ctx(s.host_context());
    global = Tensor::empty({4, 3, 3, 5});
    if (!abstract) global.copy_from(random_host({4, 3, 3, 5}, -1, 1, 321));
  }
  replicated_training_step(s, *bn, global);
  s.for_each_replica([&](int r) {
    const Batch shard = s.infeed(Batch{global, Tensor()}, r);
    (*bn)(shard.images, /*training=*/false);
  });
  StepLedger out;
  for (int c = 0; c < 2; ++c) {
    std::array<MemoryStat, kNumCategories> stats{};
    for (int k = 0; k < kNumCategories; ++k) stats[static_cast<size_t>(k)] = s.ledger().core(c).stat(static_cast<Category>(k));
    out.per_core.push_back(stats);
  }
  return out;
}

TEST(BatchNormalizationPlanningTest, AbstractStepChargesLikeRealStep) {
  const StepLedger real = ledger_of_replicated_step(false), plan = ledger_of_replicated_step(true);
  for (int c = 0; c < 2; ++c) {
    for (int k = 0; k < kNumCategories; ++k) {
      const MemoryStat& r = real.per_core[c][static_cast<size_t>(k)];
      const MemoryStat& p = plan.per_core[c][static_cast<size_t>(k)];
      const char* cat = category_name(static_cast<Category>(k));
      EXPECT_EQ(r.current, p.current) << "core " << c << " " << cat;
      EXPECT_EQ(r.peak, p.peak) << "core " << c << " " << cat;
      EXPECT_EQ(r.allocated, p.allocated) << "core " << c << " " << cat;
      EXPECT_EQ(r.freed, p.freed) << "core " << c << " " << cat;
      EXPECT_EQ(r.alloc_count, p.alloc_count) << "core " << c << " " << cat;
    }
    EXPECT_GT(real.per_core[c][static_cast<size_t>(Category::activations)].peak, 0) << "the step did run";
    EXPECT_EQ(real.per_core[c][static_cast<size_t>(Category::parameters)].current, 4 * 5 * 4)
        << "gamma, beta, moving_mean, moving_variance: 5 floats each, mirrored";
  }
}

// --- against PyTorch ---

const json& golden() { return testing::load_golden("bn_small.json"); }

using testing::tensor_of;

void expect_matches(const Tensor& got, const json& want, double rel, const std::string& what) {
  ASSERT_EQ(got.shape(), want.at("shape").get<Shape>()) << what;
  const std::vector<float> g = got.to_vector();
  const std::vector<double> w = want.at("values").get<std::vector<double>>();
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(g[i], w[i], rel * std::fabs(w[i])) << what << " element " << i;
}

// A layer holding the golden gamma, beta and initial moving statistics.
std::shared_ptr<layers::BatchNormalization> golden_layer(ReplicatedStrategy& s) {
  const json& d = golden();
  auto bn = BatchNormalization(d.at("momentum").get<float>(), d.at("epsilon").get<float>(), "bn");
  {
    auto scope = s.scope();
    bn->build({3, 3, 5});
  }
  bn->gamma()->assign(tensor_of(d.at("gamma")));
  bn->beta()->assign(tensor_of(d.at("beta")));
  bn->moving_mean()->assign(tensor_of(d.at("initial_moving_mean")));
  bn->moving_variance()->assign(tensor_of(d.at("initial_moving_variance")));
  return bn;
}

TEST(BatchNormalizationGoldenTest, OneStepMatchesPyTorchInKerasConvention) {
  ASSERT_NO_THROW(golden());
  const json& d = golden();
  ReplicatedStrategy s(DeviceSpec::custom(1, 0));
  auto bn = golden_layer(s);
  replicated_training_step(s, *bn, tensor_of(d.at("x")));
  const json& want = d.at("one_replica");
  expect_matches(bn->moving_mean()->value(), want.at("moving_mean"), 1e-5, "moving_mean");
  expect_matches(bn->moving_variance()->value(), want.at("moving_variance"), 1e-5, "moving_variance");
  // The convention is observable: torch's running_var (unbiased) differs from keel's by more than
  // the tolerance, so the comparison above could not pass with the other convention.
  const std::vector<float> got = bn->moving_variance()->value().to_vector();
  const std::vector<double> torch_var = want.at("torch_running_var").at("values").get<std::vector<double>>();
  for (size_t c = 0; c < got.size(); ++c) EXPECT_GT(std::fabs(got[c] - torch_var[c]), 1e-4 * std::fabs(torch_var[c])) << c;
  // The mean update is the same in both frameworks.
  expect_matches(bn->moving_mean()->value(), want.at("torch_running_mean"), 1e-5, "moving_mean vs torch");
}

TEST(BatchNormalizationGoldenTest, TwoReplicasTwoStepsMatchPerReplicaPyTorchCopies) {
  const json& d = golden();
  ReplicatedStrategy s(DeviceSpec::custom(2, 0));
  auto bn = golden_layer(s);
  replicated_training_step(s, *bn, tensor_of(d.at("x")));
  replicated_training_step(s, *bn, tensor_of(d.at("two_replicas").at("x_step2")));
  expect_matches(bn->moving_mean()->value(), d.at("two_replicas").at("moving_mean"), 1e-5, "moving_mean");
  expect_matches(bn->moving_variance()->value(), d.at("two_replicas").at("moving_variance"), 1e-5, "moving_variance");
}

}  // namespace
}  // namespace keel
