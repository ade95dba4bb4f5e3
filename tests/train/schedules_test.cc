// Learning-rate schedules: Keras's CosineDecay, and optimizers reading the rate at `iterations`.
#include <gtest/gtest.h>

#include <cmath>

#include "framework/device/context.h"
#include "framework/train/optimizers.h"

namespace keel {
namespace {

TEST(CosineDecay, KerasFormula) {
  CosineDecay d(0.1f, 100, 0.0f);
  EXPECT_FLOAT_EQ(d(0), 0.1f);
  EXPECT_NEAR(d(50), 0.05f, 1e-7f);
  EXPECT_NEAR(d(25), 0.1f * 0.5f * (1.0f + std::cos(3.14159265f * 0.25f)), 1e-7f);
  EXPECT_FLOAT_EQ(d(100), 0.0f);
  EXPECT_FLOAT_EQ(d(1000), 0.0f);  // held at the end
  CosineDecay floor(0.1f, 10, 0.2f);
  EXPECT_NEAR(floor(10), 0.02f, 1e-8f);  // alpha * initial
  EXPECT_THROW(CosineDecay(0.1f, 0), std::invalid_argument);
  EXPECT_EQ(d.get_config()["class_name"], "CosineDecay");
}

TEST(CosineDecay, SgdStepsUseTheRateAtTheirIteration) {
  HostScope host;
  Tensor w0 = Tensor::full({1}, 1.0f);
  Variable w("w", w0, true);
  SGD sgd(SGD::Options{.learning_rate = 0.5f});
  auto schedule = std::make_shared<CosineDecay>(0.5f, 2);
  sgd.set_schedule(schedule);
  const Tensor g = Tensor::full({1}, 1.0f);
  sgd.apply_gradients({g}, {&w});  // rate at iterations 0: 0.5
  EXPECT_FLOAT_EQ(w.value().data()[0], 0.5f);
  sgd.apply_gradients({g}, {&w});  // rate at iterations 1: 0.25
  EXPECT_FLOAT_EQ(w.value().data()[0], 0.25f);
  sgd.apply_gradients({g}, {&w});  // rate at iterations 2: 0
  EXPECT_FLOAT_EQ(w.value().data()[0], 0.25f);
  EXPECT_EQ(sgd.get_config()["learning_rate"]["class_name"], "CosineDecay");
}

TEST(CosineDecay, AdamScalesItsStepByTheScheduledRate) {
  HostScope host;
  Variable a("a", Tensor::full({1}, 0.0f), true);
  Variable b("b", Tensor::full({1}, 0.0f), true);
  Adam constant(Adam::Options{.learning_rate = 0.01f});
  Adam halved(Adam::Options{.learning_rate = 0.01f});
  halved.set_schedule(std::make_shared<CosineDecay>(0.01f, 2));  // 0.01, then 0.005
  const Tensor g = Tensor::full({1}, 2.0f);
  constant.apply_gradients({g}, {&a});
  halved.apply_gradients({g}, {&b});
  EXPECT_FLOAT_EQ(a.value().data()[0], b.value().data()[0]);  // same rate at step 1
  const float a1 = a.value().data()[0], b1 = b.value().data()[0];
  constant.apply_gradients({g}, {&a});
  halved.apply_gradients({g}, {&b});
  EXPECT_NEAR(b.value().data()[0] - b1, 0.5f * (a.value().data()[0] - a1), 1e-7f);
}

}  // namespace
}  // namespace keel
