#include "framework/train/optimizers.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/core/thread_pool.h"
#include "framework/device/collectives.h"
#include "framework/device/context.h"
#include "framework/device/ledger.h"
#include "framework/device/strategy.h"
#include "tests/support/adam_reference.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using testing::host;

// Three steps of gradients for a two-element variable starting at w0.
const std::vector<double> kW0 = {1.0, -2.0};
const std::vector<std::vector<double>> kGrads = {{0.1, -0.3}, {0.2, 0.5}, {-0.4, 0.1}};

Tensor to_tensor(const std::vector<double>& v) {
  std::vector<float> f(v.begin(), v.end());
  return host({static_cast<int64_t>(f.size())}, f);
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], rel * std::max(1.0, std::fabs(want[i]))) << what << ", element " << i;
  }
}

TEST(AdamTest, ThreeStepsMatchKerasFormulas) {
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-7;
  Adam adam(Adam::Options{.learning_rate = 0.01f, .beta_1 = 0.9f, .beta_2 = 0.999f, .epsilon = 1e-7f});
  Variable w("w", to_tensor(kW0), true);
  std::vector<double> ref = kW0, m(2, 0.0), v(2, 0.0);
  for (int t = 1; t <= 3; ++t) {
    const std::vector<double>& g = kGrads[static_cast<size_t>(t - 1)];
    adam.apply_gradients({to_tensor(g)}, {&w});
    // Keras (tf.keras.optimizers.Adam, TF >= 2.11):
    //   alpha = lr * sqrt(1 - b2^t) / (1 - b1^t); m += (g - m)(1 - b1); v += (g² - v)(1 - b2);
    //   w -= alpha * m / (sqrt(v) + eps)
    const double alpha = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    for (size_t i = 0; i < 2; ++i) {
      m[i] += (g[i] - m[i]) * (1 - b1);
      v[i] += (g[i] * g[i] - v[i]) * (1 - b2);
      ref[i] -= alpha * m[i] / (std::sqrt(v[i]) + eps);
    }
    expect_close(w.value().to_vector(), ref, 1e-6, "Adam step " + std::to_string(t));
    EXPECT_EQ(adam.iterations(), t);
  }
  const std::vector<Variable*> slots = adam.slot_variables();
  ASSERT_EQ(slots.size(), 2u);
  expect_close(slots[0]->value().to_vector(), m, 1e-6, "m");
  expect_close(slots[1]->value().to_vector(), v, 1e-6, "v");
}

// The update is one pass over memory; each element must get exactly the bits of Keras's formula
// computed element by element (explicit fmas, exact sqrt), past a vectorised body and a ragged end.
TEST(AdamTest, UpdateIsBitIdenticalToTheElementwiseFormula) {
  const int64_t n = 10007;
  std::vector<float> w0(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) w0[static_cast<size_t>(i)] = std::sin(0.37f * static_cast<float>(i));
  Adam adam(Adam::Options{.learning_rate = 0.003f});
  Variable w("w", host({n}, w0), true);
  const std::vector<float> zeros(static_cast<size_t>(n), 0.0f);
  testing::AdamReference ref{w0, zeros, zeros};
  for (int t = 1; t <= 3; ++t) {
    std::vector<float> g(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) g[static_cast<size_t>(i)] = std::cos(0.11f * static_cast<float>(i * t)) * 1e-2f;
    adam.apply_gradients({host({n}, g)}, {&w});
    testing::adam_reference_step(ref, g, 0.003f, t);
  }
  const std::vector<float> got = w.value().to_vector();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[static_cast<size_t>(i)], ref.w[static_cast<size_t>(i)]) << "element " << i;
}

TEST(AdamTest, DefaultsAreKeras) {
  Adam adam;
  EXPECT_FLOAT_EQ(adam.learning_rate(), 0.001f);
  const nlohmann::json c = adam.get_config();
  EXPECT_EQ(c["name"], "Adam");
  EXPECT_FLOAT_EQ(c["beta_1"].get<float>(), 0.9f);
  EXPECT_FLOAT_EQ(c["beta_2"].get<float>(), 0.999f);
  EXPECT_FLOAT_EQ(c["epsilon"].get<float>(), 1e-7f);
}

// With weight_decay, Keras 3 first decays w -= w * wd * lr.
void run_sgd(bool nesterov, float weight_decay = 0.0f) {
  const double lr = 0.1, mu = 0.9, wd = weight_decay;
  SGD sgd(SGD::Options{.learning_rate = 0.1f, .momentum = 0.9f, .nesterov = nesterov, .weight_decay = weight_decay});
  Variable w("w", to_tensor(kW0), true);
  std::vector<double> ref = kW0, vel(2, 0.0);
  for (int t = 1; t <= 3; ++t) {
    const std::vector<double>& g = kGrads[static_cast<size_t>(t - 1)];
    sgd.apply_gradients({to_tensor(g)}, {&w});
    // Keras SGD: velocity = momentum * velocity - lr * g;
    //   w += velocity                       (momentum)
    //   w += momentum * velocity - lr * g   (nesterov)
    for (size_t i = 0; i < 2; ++i) {
      ref[i] -= ref[i] * wd * lr;
      vel[i] = mu * vel[i] - lr * g[i];
      ref[i] += nesterov ? mu * vel[i] - lr * g[i] : vel[i];
    }
    expect_close(w.value().to_vector(), ref, 1e-6, std::string(nesterov ? "nesterov" : "momentum") + " step " +
                                                       std::to_string(t));
  }
  ASSERT_EQ(sgd.slot_variables().size(), 1u);
  EXPECT_EQ(sgd.slot_variables()[0]->name(), "SGD/w/momentum");
  expect_close(sgd.slot_variables()[0]->value().to_vector(), vel, 1e-6, "velocity");
}

TEST(SGDTest, MomentumThreeStepsMatchKerasFormulas) { run_sgd(false); }
TEST(SGDTest, NesterovThreeStepsMatchKerasFormulas) { run_sgd(true); }

// Keras 3's weight_decay: before each update w -= w * wd * lr, lr the update's own (here a cosine
// schedule's, so a wrong step shows), then the optimizer's rule on the decayed w.
TEST(AdamTest, WeightDecayIsKerasDecoupledDecayBeforeEachUpdate) {
  const double b1 = 0.9, b2 = 0.999, eps = 1e-7, wd = 0.1;
  Adam adam(Adam::Options{.learning_rate = 0.01f, .weight_decay = 0.1f});
  adam.set_schedule(std::make_shared<CosineDecay>(0.01f, 4));
  Variable w("w", to_tensor(kW0), true);
  std::vector<double> ref = kW0, m(2, 0.0), v(2, 0.0);
  for (int t = 1; t <= 3; ++t) {
    const std::vector<double>& g = kGrads[static_cast<size_t>(t - 1)];
    adam.apply_gradients({to_tensor(g)}, {&w});
    const double lr = 0.01 * 0.5 * (1 + std::cos(3.14159265358979323846 * (t - 1) / 4.0));
    const double alpha = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    for (size_t i = 0; i < 2; ++i) {
      ref[i] -= ref[i] * wd * lr;
      m[i] += (g[i] - m[i]) * (1 - b1);
      v[i] += (g[i] * g[i] - v[i]) * (1 - b2);
      ref[i] -= alpha * m[i] / (std::sqrt(v[i]) + eps);
    }
    expect_close(w.value().to_vector(), ref, 1e-6, "Adam with weight decay, step " + std::to_string(t));
  }
  EXPECT_FLOAT_EQ(adam.get_config()["weight_decay"].get<float>(), 0.1f);
  EXPECT_TRUE(Adam().get_config()["weight_decay"].is_null()) << "Keras's default: None";
}

TEST(SGDTest, WeightDecayWithMomentumMatchesKeras) {
  run_sgd(false, 0.05f);
  EXPECT_THROW(SGD(SGD::Options{.weight_decay = -0.1f}), std::invalid_argument);
  EXPECT_THROW(Adam(Adam::Options{.weight_decay = std::numeric_limits<float>::quiet_NaN()}), std::invalid_argument);
  EXPECT_THROW(make_optimizer("adam", 0.001f, 0.0f, false, std::numeric_limits<float>::infinity()), std::invalid_argument);
  EXPECT_FLOAT_EQ(make_optimizer("sgd", 0.1f, 0.0f, false, 5e-4f)->weight_decay(), 5e-4f);
}

TEST(SGDTest, PlainSGDWithoutMomentum) {
  // Keras's default SGD: momentum 0, no slots, w -= lr * g.
  SGD sgd;
  EXPECT_FLOAT_EQ(sgd.learning_rate(), 0.01f);
  Variable w("w", to_tensor(kW0), true);
  std::vector<double> ref = kW0;
  for (const std::vector<double>& g : kGrads) {
    ASSERT_NO_THROW(sgd.apply_gradients({to_tensor(g)}, {&w}));
    for (size_t i = 0; i < 2; ++i) ref[i] -= 0.01 * g[i];
  }
  expect_close(w.value().to_vector(), ref, 1e-6, "plain SGD");
  EXPECT_TRUE(sgd.slot_variables().empty());
  EXPECT_EQ(sgd.iterations(), 3);
}

TEST(SGDTest, MakeOptimizerPlainSGDTrains) {
  // The CLI's path: make_optimizer("sgd") with the default momentum of 0.
  std::unique_ptr<Optimizer> opt = make_optimizer("sgd", 0.5f);
  Variable w("w", host({1}, {1.0f}), true);
  ASSERT_NO_THROW(opt->apply_gradients({host({1}, {2.0f})}, {&w}));
  EXPECT_FLOAT_EQ(w.value().item(), 0.0f);
}

TEST(OptimizerTest, AdamSlotNamesAndOrder) {
  Adam adam;
  Variable k("dense/kernel", Tensor::from_vector({2, 2}, std::vector<float>{1, 2, 3, 4}), true);
  Variable b("dense/bias", Tensor::from_vector({2}, std::vector<float>{0, 0}), true);
  Variable k1("dense_1/kernel", Tensor::from_vector({2, 1}, std::vector<float>{1, 1}), true);
  adam.apply_gradients({Tensor::from_vector({2, 2}, std::vector<float>{1, 1, 1, 1}),
                        Tensor::from_vector({2}, std::vector<float>{1, 1}),
                        Tensor::from_vector({2, 1}, std::vector<float>{1, 1})},
                       {&k, &b, &k1});
  std::vector<std::string> names;
  for (Variable* v : adam.slot_variables()) {
    names.push_back(v->name());
    EXPECT_FALSE(v->trainable()) << v->name();
  }
  // Keras's order: every m (in variable order), then every v.
  EXPECT_EQ(names, (std::vector<std::string>{"Adam/dense/kernel/m", "Adam/dense/bias/m", "Adam/dense_1/kernel/m",
                                             "Adam/dense/kernel/v", "Adam/dense/bias/v", "Adam/dense_1/kernel/v"}));
  EXPECT_EQ(adam.slot_variables()[0]->shape(), (Shape{2, 2}));
  EXPECT_EQ(adam.slot_variables()[4]->shape(), (Shape{2}));
}

TEST(OptimizerTest, IterationsAdvanceOncePerStepNotPerVariable) {
  Adam adam;
  std::vector<std::unique_ptr<Variable>> vars;
  std::vector<Variable*> ptrs;
  std::vector<Tensor> grads;
  for (int i = 0; i < 5; ++i) {
    vars.push_back(std::make_unique<Variable>("v" + std::to_string(i), host({1}, {1.0f}), true));
    ptrs.push_back(vars.back().get());
    grads.push_back(host({1}, {0.5f}));
  }
  adam.apply_gradients(grads, ptrs);
  EXPECT_EQ(adam.iterations(), 1);
  adam.apply_gradients(grads, ptrs);
  EXPECT_EQ(adam.iterations(), 2);
  // With bias correction at step 2 (not step 10): the second step is again ~lr for constant g.
  EXPECT_NEAR(vars[4]->value().item(), 1.0f - 2 * 0.001f, 1e-6);
}

TEST(OptimizerTest, UndefinedGradientIsSkipped) {
  Adam adam(Adam::Options{.learning_rate = 0.1f});
  Variable a("a", host({2}, {1, 1}), true);
  Variable b("b", host({2}, {5, 5}), true);
  adam.apply_gradients({host({2}, {1, -1}), Tensor()}, {&a, &b});
  EXPECT_EQ(b.value().to_vector(), (std::vector<float>{5, 5}));
  expect_close(a.value().to_vector(), {0.9, 1.1}, 1e-5, "a");
  EXPECT_EQ(adam.iterations(), 1);
  // b's slots stay zero.
  for (Variable* s : adam.slot_variables()) {
    if (s->name().rfind("Adam/b/", 0) == 0) {
      EXPECT_EQ(s->value().to_vector(), (std::vector<float>{0, 0})) << s->name();
    }
  }
}

TEST(OptimizerTest, MismatchedArgumentsThrowInvalidArgument) {
  Adam adam;
  Variable a("a", host({2}, {1, 1}), true);
  EXPECT_THROW(adam.apply_gradients({host({2}, {1, 1}), host({2}, {1, 1})}, {&a}), std::invalid_argument);
  EXPECT_THROW(adam.apply_gradients({host({3}, {1, 1, 1})}, {&a}), std::invalid_argument);
}

TEST(OptimizerTest, LearningRatesMustBeFiniteAndPositive) {
  for (float lr : {0.0f, -0.5f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    EXPECT_THROW(Adam(Adam::Options{.learning_rate = lr}), std::invalid_argument) << lr;
    EXPECT_THROW(SGD(SGD::Options{.learning_rate = lr}), std::invalid_argument) << lr;
  }
  for (float lr : {0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                   std::numeric_limits<float>::quiet_NaN()}) {
    EXPECT_THROW(make_optimizer("adam", lr), std::invalid_argument) << lr;
  }
  EXPECT_EQ(make_optimizer("adam", -1.0f)->learning_rate(), 0.001f) << "negative: Keras's default";
  EXPECT_THROW(SGD(SGD::Options{.momentum = 1.5f}), std::invalid_argument);
  EXPECT_THROW(SGD(SGD::Options{.momentum = std::numeric_limits<float>::quiet_NaN()}), std::invalid_argument);
}

TEST(OptimizerTest, SlotsAreChargedAsOptimizerOnEveryCoreWhenMirrored) {
  Ledger ledger(DeviceSpec::custom(2, 0));
  DeviceContext mirrored;
  mirrored.ledger = &ledger;
  mirrored.core = -1;
  mirrored.category = Category::parameters;
  ContextScope scope(mirrored);
  Variable w("w", Tensor::zeros({3, 4}), true);
  Adam adam;
  adam.build({&w});
  for (int c = 0; c < 2; ++c) {
    EXPECT_EQ(ledger.core(c).stat(Category::optimizer).current, 2 * 12 * 4) << c;
    EXPECT_EQ(ledger.core(c).stat(Category::parameters).current, 12 * 4) << c;
  }
  bool saw_m = false;
  for (const LiveAllocation& a : ledger.core(1).live_allocations()) saw_m = saw_m || a.owner == "Adam/w/m";
  EXPECT_TRUE(saw_m);
}

TEST(OptimizerTest, InsideStrategyRunAppliesTheMeanOnce) {
  ReplicatedStrategy s(DeviceSpec::custom(4, 0));
  Variable* w = nullptr;
  std::unique_ptr<Variable> owned;
  {
    auto scope = s.scope();
    owned = std::make_unique<Variable>("w", Tensor::zeros({2}), true);
    w = owned.get();
  }
  SGD sgd(SGD::Options{.learning_rate = 1.0f, .momentum = 0.5f});
  std::vector<Batch> shards = s.distribute(Batch{Tensor::from_vector({4, 1}, std::vector<float>{0, 1, 2, 3}), Tensor()});
  s.run(
      [&](const Batch&) {
        const float r = static_cast<float>(current_replica_context()->replica_id());
        sgd.apply_gradients({Tensor::full({2}, r)}, {w});
        return 0;
      },
      shards);
  // Mean gradient 1.5 applied once: w = 0 - 1.0 * 1.5.
  EXPECT_EQ(w->value().to_vector(), (std::vector<float>{-1.5f, -1.5f}));
  EXPECT_EQ(sgd.iterations(), 1);
  for (int c = 0; c < 4; ++c) EXPECT_EQ(s.ledger().core(c).stat(Category::optimizer).current, 8) << c;
}

// Gradients large enough to be checked in pieces on several threads: still the first variable.
TEST(OptimizerTest, TheFirstNonFiniteVariableIsFoundInPiecesOnThreads) {
  const KernelThreadsScope threads(3);
  const int64_t n = 300000;
  Variable a("a", Tensor::zeros({n}), true), b("b", Tensor::zeros({n}), true), c("c", Tensor::zeros({n}), true);
  Tensor ga = Tensor::full({n}, 1.0f), gb = Tensor::full({n}, 1.0f), gc = Tensor::full({n}, 1.0f);
  gb.data()[n - 3] = std::nanf("");
  gc.data()[0] = std::numeric_limits<float>::infinity();
  SGD sgd(SGD::Options{.learning_rate = 0.1f});
  const GradientUpdate u = sgd.apply_gradients({ga, gb, gc}, {&a, &b, &c});
  EXPECT_FALSE(u.applied);
  EXPECT_EQ(u.non_finite_variable, "b");
  EXPECT_EQ(a.value().data()[0], 0.0f) << "nothing moved";
}

// One replica's gradients checked as backward finishes them (GradientCheck): the first variable in
// the variables' order whatever order backward finishes them in, abstract gradients skipped, each
// gradient handed on; apply_gradients takes the check's verdict instead of checking again.
TEST(OptimizerTest, AGradientCheckInBackwardGivesTheUpdateItsVerdict) {
  const float inf = std::numeric_limits<float>::infinity();
  Variable a("a", host({2}, {1, 1}), true);
  Variable b("b", host({3}, {5, 5, 5}), true);
  Variable c("c", host({1}, {2}), true);
  GradientCheck check(3);
  size_t handed_on = 0;
  const GradientReadyFn hook = check.hook([&](size_t, Tensor g) {
    ++handed_on;
    return g;
  });
  EXPECT_EQ(hook(2, host({1}, {inf})).to_vector(), (std::vector<float>{inf}));  // backward's order: c, b, a
  hook(1, host({3}, {0, std::nanf(""), 0}));
  hook(0, host({2}, {1, -1}));
  EXPECT_EQ(handed_on, 3u);
  EXPECT_EQ(check.first_non_finite(), 1u);
  Adam adam(Adam::Options{.learning_rate = 0.1f});
  // The verdict, not these finite stand-ins, decides: the update is skipped, naming b.
  const GradientUpdate u = adam.apply_gradients({host({2}, {1, -1}), host({3}, {0, 0, 0}), host({1}, {0})}, {&a, &b, &c},
                                                GradientForm::local, &check);
  EXPECT_FALSE(u.applied);
  EXPECT_EQ(u.non_finite_variable, "b");
  EXPECT_EQ(a.value().to_vector(), (std::vector<float>{1, 1}));
  EXPECT_EQ(adam.iterations(), 0);

  GradientCheck clean(3);
  const GradientReadyFn pass = clean.hook(nullptr);
  for (size_t i = 0; i < 3; ++i) pass(i, host({2}, {0.5f, -0.5f}));
  EXPECT_EQ(clean.first_non_finite(), 3u);
  EXPECT_TRUE(adam.apply_gradients({host({2}, {1, -1}), host({3}, {0, 0, 0}), host({1}, {0})}, {&a, &b, &c},
                                   GradientForm::local, &clean)
                  .applied);
  EXPECT_EQ(adam.iterations(), 1);
}

TEST(OptimizerTest, ANonFiniteGradientSkipsTheWholeUpdate) {
  for (const float bad : {std::nanf(""), std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
    Adam adam(Adam::Options{.learning_rate = 0.1f});
    Variable a("a", host({2}, {1, 1}), true);
    Variable b("b", host({3}, {5, 5, 5}), true);
    Variable c("c", host({1}, {2}), true);
    const GradientUpdate u = adam.apply_gradients({host({2}, {1, -1}), host({3}, {0, bad, 0}), host({1}, {bad})}, {&a, &b, &c});
    EXPECT_FALSE(u.applied) << bad;
    EXPECT_EQ(u.non_finite_variable, "b") << "the first, in the variables' order";
    // Nothing moved, not even the variable before it; the step is not counted.
    EXPECT_EQ(a.value().to_vector(), (std::vector<float>{1, 1}));
    EXPECT_EQ(b.value().to_vector(), (std::vector<float>{5, 5, 5}));
    EXPECT_EQ(adam.iterations(), 0);
    for (Variable* s : adam.slot_variables()) {
      for (float v : s->value().to_vector()) EXPECT_EQ(v, 0.0f) << s->name();
    }
    // The next finite step is the first one applied.
    const GradientUpdate next = adam.apply_gradients({host({2}, {1, -1}), host({3}, {0, 0, 0}), host({1}, {0})}, {&a, &b, &c});
    EXPECT_TRUE(next.applied);
    EXPECT_EQ(next.non_finite_variable, "");
    EXPECT_EQ(adam.iterations(), 1);
    expect_close(a.value().to_vector(), {0.9, 1.1}, 1e-5, "a");
  }
}

// 4 replicas, 8 variables of 3 elements: each replica checks and updates its shard of every
// variable. One replica's non-finite contribution, or a mean that overflows although every replica's gradient is finite, skips the
// update on every replica, and all of them name the same first variable.
TEST(OptimizerTest, InsideStrategyRunEveryReplicaSkipsWhenAnyShareIsNotFinite) {
  constexpr int kReplicas = 4, kVars = 8;
  const float big = std::numeric_limits<float>::max();
  struct Case {
    int bad_replica;
    std::vector<int> bad_vars;
    float value;
    const char* first;
  };
  for (const Case& k : {Case{3, {6, 5}, std::nanf(""), "v5"}, Case{0, {7}, std::numeric_limits<float>::infinity(), "v7"},
                        Case{-1, {2}, big, "v2"}}) {
    ReplicatedStrategy s(DeviceSpec::custom(kReplicas, 0));
    std::vector<std::unique_ptr<Variable>> vars;
    std::vector<Variable*> ptrs;
    {
      auto scope = s.scope();
      for (int i = 0; i < kVars; ++i) {
        vars.push_back(std::make_unique<Variable>("v" + std::to_string(i), Tensor::full({3}, 1.0f), true));
        ptrs.push_back(vars.back().get());
      }
    }
    SGD sgd(SGD::Options{.learning_rate = 0.5f, .momentum = 0.9f});
    std::vector<GradientUpdate> updates(kReplicas);
    std::vector<Batch> shards =
        s.distribute(Batch{Tensor::from_vector({kReplicas, 1}, std::vector<float>(kReplicas, 0.0f)), Tensor()});
    s.run(
        [&](const Batch&) {
          const int r = current_replica_context()->replica_id();
          std::vector<Tensor> grads;
          for (int i = 0; i < kVars; ++i) {
            const bool bad = (k.bad_replica < 0 || r == k.bad_replica) &&
                             std::find(k.bad_vars.begin(), k.bad_vars.end(), i) != k.bad_vars.end();
            grads.push_back(Tensor::full({3}, bad ? k.value : 0.25f));
          }
          updates[static_cast<size_t>(r)] = sgd.apply_gradients(std::move(grads), ptrs);
          return 0;
        },
        shards);
    for (int r = 0; r < kReplicas; ++r) {
      EXPECT_FALSE(updates[static_cast<size_t>(r)].applied) << k.first << " replica " << r;
      EXPECT_EQ(updates[static_cast<size_t>(r)].non_finite_variable, k.first) << "replica " << r;
    }
    for (const auto& v : vars) EXPECT_EQ(v->value().to_vector(), (std::vector<float>{1, 1, 1})) << v->name();
    EXPECT_EQ(sgd.iterations(), 0);
  }
}

// Sharded training state, ZeRO's way: each core is charged its shard of every slot; updating with
// any sharding gives the bits of the replicated update, with replica-dependent gradients of very
// different magnitudes (so that any other order of summation would show), variables of 1 to 23
// elements over 3 replicas (uneven shards, empty ones for the 1-element variable), and three steps.
std::vector<std::vector<float>> sharded_adam_run(ShardingMode mode, std::vector<int64_t>* optimizer_bytes) {
  constexpr int kReplicas = 3, kSteps = 3;
  const std::vector<int64_t> sizes = {1, 2, 7, 23};
  ReplicatedStrategy s(DeviceSpec::custom(kReplicas, 0), ReplicatedStrategy::Options{.shard = mode});
  std::vector<std::unique_ptr<Variable>> vars;
  std::vector<Variable*> ptrs;
  Adam adam(Adam::Options{.learning_rate = 0.01f});
  {
    auto scope = s.scope();
    for (size_t i = 0; i < sizes.size(); ++i) {
      vars.push_back(std::make_unique<Variable>("v" + std::to_string(i), Tensor::full({sizes[i]}, 0.5f), true));
      ptrs.push_back(vars.back().get());
    }
    adam.build(ptrs);
  }
  if (optimizer_bytes) {
    for (int c = 0; c < kReplicas; ++c) optimizer_bytes->push_back(s.ledger().core(c).stat(Category::optimizer).current);
  }
  std::vector<Batch> shards = s.distribute(Batch{Tensor::from_vector({kReplicas, 1}, std::vector<float>(kReplicas, 0.0f)), Tensor()});
  for (int step = 0; step < kSteps; ++step) {
    s.run(
        [&](const Batch&) {
          const int r = current_replica_context()->replica_id();
          std::vector<Tensor> grads;
          for (size_t i = 0; i < sizes.size(); ++i) {
            std::vector<float> g(static_cast<size_t>(sizes[i]));
            for (size_t e = 0; e < g.size(); ++e) g[e] = (r % 2 ? 1e7f : 1e-3f) * static_cast<float>(e + 1 + step) / 7.0f;
            grads.push_back(Tensor::from_vector({sizes[i]}, g).clone());
          }
          EXPECT_TRUE(adam.apply_gradients(std::move(grads), ptrs).applied);
          return 0;
        },
        shards);
  }
  std::vector<std::vector<float>> out;
  for (const auto& v : vars) out.push_back(v->value().to_vector());
  for (Variable* slot : adam.slot_variables()) out.push_back(slot->value().to_vector());
  return out;
}

TEST(OptimizerTest, ShardedUpdatesAreBitIdenticalToReplicated) {
  std::vector<int64_t> mirrored_bytes, sharded_bytes;
  const auto plain = sharded_adam_run(ShardingMode::none, &mirrored_bytes);
  for (ShardingMode mode : {ShardingMode::optimizer, ShardingMode::gradients}) {
    sharded_bytes.clear();
    const auto sharded = sharded_adam_run(mode, &sharded_bytes);
    ASSERT_EQ(sharded.size(), plain.size());
    for (size_t i = 0; i < plain.size(); ++i) {
      ASSERT_EQ(sharded[i].size(), plain[i].size());
      EXPECT_EQ(std::memcmp(sharded[i].data(), plain[i].data(), plain[i].size() * sizeof(float)), 0)
          << sharding_mode_name(mode) << ": variable or slot " << i;
    }
    // 33 elements per slot in all, mirrored on every core; sharded 3 + 2 + ... : shard_range of each.
    for (int c = 0; c < 3; ++c) {
      EXPECT_EQ(mirrored_bytes[static_cast<size_t>(c)], 2 * 33 * 4);
      int64_t want = 0;
      for (int64_t n : {1, 2, 7, 23}) want += 2 * 4 * shard_range(n, 3, c).size();
      EXPECT_EQ(sharded_bytes[static_cast<size_t>(c)], want) << sharding_mode_name(mode) << " core " << c;
    }
  }
  EXPECT_NE(plain[0], std::vector<float>{0.5f}) << "the variables moved";
}

// Under ZeRO-2 a reduce-scattered gradient with a NaN or infinity on any replica's shard skips the
// whole update on every replica, naming the same first variable.
TEST(OptimizerTest, ShardedGradientsStillSkipANonFiniteStepEverywhere) {
  constexpr int kReplicas = 4;
  ReplicatedStrategy s(DeviceSpec::custom(kReplicas, 0), ReplicatedStrategy::Options{.shard = ShardingMode::gradients});
  std::vector<std::unique_ptr<Variable>> vars;
  std::vector<Variable*> ptrs;
  {
    auto scope = s.scope();
    for (int i = 0; i < 3; ++i) {
      vars.push_back(std::make_unique<Variable>("v" + std::to_string(i), Tensor::full({9}, 1.0f), true));
      ptrs.push_back(vars.back().get());
    }
  }
  SGD sgd;
  std::vector<GradientUpdate> updates(kReplicas);
  std::vector<Batch> shards = s.distribute(Batch{Tensor::from_vector({kReplicas, 1}, std::vector<float>(kReplicas, 0.0f)), Tensor()});
  s.run(
      [&](const Batch&) {
        const int r = current_replica_context()->replica_id();
        std::vector<Tensor> grads;
        for (int i = 0; i < 3; ++i) {
          Tensor g = Tensor::full({9}, 0.25f);
          if (r == 2 && i >= 1) g.data()[8] = std::nanf("");  // element 8: replica 3's shard of the sum
          grads.push_back(g);
        }
        updates[static_cast<size_t>(r)] = sgd.apply_gradients(std::move(grads), ptrs);
        return 0;
      },
      shards);
  for (int r = 0; r < kReplicas; ++r) {
    EXPECT_FALSE(updates[static_cast<size_t>(r)].applied) << r;
    EXPECT_EQ(updates[static_cast<size_t>(r)].non_finite_variable, "v1") << r;
  }
  for (const auto& v : vars) EXPECT_EQ(v->value().to_vector(), std::vector<float>(9, 1.0f)) << v->name();
}

TEST(OptimizerTest, MakeOptimizer) {
  EXPECT_EQ(make_optimizer("Adam")->name(), "Adam");
  EXPECT_FLOAT_EQ(make_optimizer("adam", 0.5f)->learning_rate(), 0.5f);
  EXPECT_FLOAT_EQ(make_optimizer("sgd")->learning_rate(), 0.01f);
  EXPECT_THROW(make_optimizer("rmsprop"), std::invalid_argument);
}

}  // namespace
}  // namespace keel

namespace keel {
namespace {

TEST(OptimizerTest, TwoStepsInsideOneRunUseConsecutiveStepNumbers) {
  // A custom loop may apply gradients more than once per strategy.run (gradient accumulation, several
  // steps per call). Every replica must read the same, advanced, step number for its share of the
  // variables: Adam's bias correction depends on it.
  constexpr int kReplicas = 8, kVars = 16, kRepeats = 40;
  for (int repeat = 0; repeat < kRepeats; ++repeat) {
    ReplicatedStrategy s(DeviceSpec::custom(kReplicas, 0));
    std::vector<std::unique_ptr<Variable>> vars;
    std::vector<Variable*> ptrs;
    {
      auto scope = s.scope();
      for (int i = 0; i < kVars; ++i) {
        vars.push_back(std::make_unique<Variable>("v" + std::to_string(i), Tensor::zeros({1}), true));
        ptrs.push_back(vars.back().get());
      }
    }
    Adam adam(Adam::Options{.learning_rate = 0.1f});
    std::vector<Batch> shards =
        s.distribute(Batch{Tensor::from_vector({kReplicas, 1}, std::vector<float>(kReplicas, 0.0f)), Tensor()});
    s.run(
        [&](const Batch&) {
          for (int step = 0; step < 2; ++step) {
            std::vector<Tensor> grads;
            for (int i = 0; i < kVars; ++i) grads.push_back(Tensor::full({1}, step == 0 ? 1.0f : -0.5f));
            adam.apply_gradients(grads, ptrs);
          }
          return 0;
        },
        shards);
    ASSERT_EQ(adam.iterations(), 2);
    // The same two steps on one host variable.
    Adam ref(Adam::Options{.learning_rate = 0.1f});
    Variable r("r", Tensor::from_vector({1}, std::vector<float>{0.0f}), true);
    ref.apply_gradients({Tensor::from_vector({1}, std::vector<float>{1.0f})}, {&r});
    ref.apply_gradients({Tensor::from_vector({1}, std::vector<float>{-0.5f})}, {&r});
    for (int i = 0; i < kVars; ++i) {
      ASSERT_FLOAT_EQ(vars[static_cast<size_t>(i)]->value().item(), r.value().item())
          << "variable " << i << ", repeat " << repeat;
    }
  }
}

}  // namespace
}  // namespace keel
