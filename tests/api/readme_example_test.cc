// The README's C++ example, compiled and run as written (on a small slice of the data).
#include <gtest/gtest.h>

#include "framework/keel.h"  // <keel/keel.h> when installed
#include "datasets/fashion_mnist.h"

namespace {

TEST(ReadmeExample, FitThenACustomLoopStep) {
  keel::ReplicatedStrategy strategy(keel::DeviceSpec::preset("v3-8"));
  std::unique_ptr<keel::Sequential> model;
  {
    auto scope = strategy.scope();  // variables created here are mirrored (charged) on every core
    model = std::make_unique<keel::Sequential>(
        std::vector<keel::LayerPtr>{keel::Dense(128, "relu", keel::Shape{784}), keel::Dense(10, "softmax")});
    model->compile(std::make_shared<keel::Adam>(), std::make_shared<keel::SparseCategoricalCrossentropy>());
  }
  keel::LabeledImages data = keel::load_fashion_mnist("train");
  const int64_t n = 2048;  // the README uses all 60000
  keel::Tensor images = data.images.slice_rows(0, n).reshape({n, 784});
  keel::Tensor labels = data.labels.slice_rows(0, n);
  auto train = keel::data::from_tensor_slices({images, labels})
                   .shuffle(n, /*seed=*/1)
                   .batch(128, /*drop_remainder=*/true)
                   .prefetch(keel::data::AUTOTUNE);
  keel::History history = model->fit(train, {.epochs = 2});
  ASSERT_EQ(history.epochs.size(), 2u);
  EXPECT_LT(history.epochs[1].at("loss"), history.epochs[0].at("loss"));
  EXPECT_EQ(strategy.ledger().core(7).stat(keel::Category::parameters).current, 407080);

  keel::Batch global_batch{images.slice_rows(0, 128), labels.slice_rows(0, 128)};
  const int64_t before = model->optimizer().iterations();
  auto per_replica = strategy.run_distributed(
      [&](const keel::Batch& b) {  // once per core, in parallel
        keel::GradientTape tape;
        keel::Tensor loss = model->loss()(b.labels, (*model)(b.images, /*training=*/true));
        auto vars = model->trainable_variables();
        model->optimizer().apply_gradients(tape.gradient(loss, vars), vars);  // all-reduced (mean) across cores
        return loss.item();
      },
      global_batch);
  ASSERT_EQ(per_replica.size(), 8u);
  EXPECT_EQ(model->optimizer().iterations(), before + 1);  // one update, whatever the replica count
  for (float l : per_replica) EXPECT_GT(l, 0.0f);
}

}  // namespace

#include "framework/layers/conv_layers.h"
#include "framework/layers/normalization.h"
#include "framework/model/functional.h"

namespace {

TEST(ReadmeExample, FunctionalModel) {
  keel::HostScope host;
  keel::KerasTensor inputs = keel::Input({32, 32, 3});
  keel::KerasTensor x = (*keel::Conv2D(64, 3, {.padding = "same"}))(inputs);
  x = (*keel::BatchNormalization())(x);
  x = (*keel::Add())({x, (*keel::Conv2D(64, 1))(inputs)});
  x = (*keel::GlobalAveragePooling2D())(x);
  keel::Functional model(inputs, (*keel::Dense(10, "softmax"))(x));
  keel::Tensor y = model(keel::Tensor::full({2, 32, 32, 3}, 0.5f));
  EXPECT_EQ(y.shape(), keel::Shape({2, 10}));
  EXPECT_NEAR(y.array().sum(), 2.0f, 1e-5f);  // two softmax rows
}

}  // namespace
