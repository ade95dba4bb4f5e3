// Layer: Keras's naming counters and clear_session, build, weights and their order, trainable flags,
// where weights and activations are charged, and the base config.
#include "framework/layers/layer.h"

#include <cmath>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "framework/device/context.h"
#include "framework/device/ledger.h"
#include "framework/device/strategy.h"
#include "framework/layers/core_layers.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using testing::host;

// A layer with weights of both kinds, the non-trainable one created first:
//   moving (in,) "ones", non-trainable; kernel (in, 2) glorot_uniform; bias (2,) zeros.
class Probe : public Layer {
 public:
  explicit Probe(std::string name = "", std::optional<Shape> declared = std::nullopt) : Layer("probe", name) {
    if (declared) set_declared_input_shape(*declared);
  }
  std::string class_name() const override { return "Probe"; }
  Tensor call(const Tensor& x, bool training) override {
    ++calls;
    last_training = training;
    return x.clone();  // a new tensor, charged per the context the layer sets
  }
  int calls = 0;
  bool last_training = false;
  int builds = 0;

 protected:
  void build_weights(const Shape& input_shape) override {
    ++builds;
    add_weight("moving", {input_shape.back()}, "ones", /*trainable=*/false);
    add_weight("kernel", {input_shape.back(), 2}, "glorot_uniform");
    add_weight("bias", {2}, "zeros");
  }
};

std::vector<std::string> names_of(const std::vector<Variable*>& vars) {
  std::vector<std::string> out;
  for (const Variable* v : vars) out.push_back(v->name());
  return out;
}

TEST(LayerNamingTest, CountersPerPrefixAndClearSession) {
  clear_session();
  EXPECT_EQ(unique_layer_name("probe"), "probe");
  EXPECT_EQ(unique_layer_name("probe"), "probe_1");
  EXPECT_EQ(unique_layer_name("other"), "other") << "each prefix counts on its own";
  EXPECT_EQ(unique_layer_name("probe"), "probe_2");
  clear_session();
  EXPECT_EQ(unique_layer_name("probe"), "probe") << "clear_session starts every prefix again";
  EXPECT_EQ(unique_layer_name("other"), "other");
}

TEST(LayerNamingTest, UnnamedLayersTakeTheNextNameAndNamedOnesDoNotCount) {
  clear_session();
  Probe a, b;
  Probe named("mine");
  Probe c;
  EXPECT_EQ(a.name(), "probe");
  EXPECT_EQ(b.name(), "probe_1");
  EXPECT_EQ(named.name(), "mine");
  EXPECT_EQ(c.name(), "probe_2");
  EXPECT_EQ(Dense(3)->name(), "dense") << "Dense counts under its own prefix";
  EXPECT_EQ(Dense(3)->name(), "dense_1");
  clear_session();
  EXPECT_EQ(Dense(3)->name(), "dense");
}

TEST(LayerNamingTest, ConcurrentNamesAreAllDistinct) {
  clear_session();
  constexpr int kThreads = 8, kEach = 100;
  std::mutex mu;
  std::set<std::string> names;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        const std::string n = unique_layer_name("concurrent");
        std::lock_guard<std::mutex> lock(mu);
        names.insert(n);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(names.size(), static_cast<size_t>(kThreads * kEach));
  EXPECT_TRUE(names.count("concurrent"));
  EXPECT_TRUE(names.count("concurrent_" + std::to_string(kThreads * kEach - 1)));
  clear_session();
}

TEST(LayerBuildTest, BuildCreatesTheWeightsOnce) {
  HostScope host_scope;
  Probe p("p");
  EXPECT_FALSE(p.built());
  EXPECT_TRUE(p.weights().empty());
  EXPECT_EQ(p.count_params(), 0);
  p.build({5});
  EXPECT_TRUE(p.built());
  EXPECT_EQ(p.input_shape(), (Shape{5}));
  EXPECT_EQ(p.input_shapes(), (std::vector<Shape>{{5}}));
  EXPECT_EQ(p.builds, 1);
  ASSERT_EQ(p.weights().size(), 3u);
  p.build({7});  // already built: ignored
  EXPECT_EQ(p.builds, 1);
  EXPECT_EQ(p.input_shape(), (Shape{5}));
  EXPECT_EQ(p.weights().size(), 3u);
}

TEST(LayerBuildTest, WeightsAreNamedShapedAndOrderedTrainableFirst) {
  HostScope host_scope;
  Probe p("p");
  p.build({5});
  EXPECT_EQ(names_of(p.weights()), (std::vector<std::string>{"p/kernel", "p/bias", "p/moving"}));
  EXPECT_EQ(names_of(p.trainable_weights()), (std::vector<std::string>{"p/kernel", "p/bias"}));
  EXPECT_EQ(names_of(p.non_trainable_weights()), (std::vector<std::string>{"p/moving"}));
  EXPECT_EQ(p.weights()[0]->shape(), (Shape{5, 2}));
  EXPECT_EQ(p.weights()[1]->shape(), (Shape{2}));
  EXPECT_EQ(p.weights()[2]->shape(), (Shape{5}));
  for (Variable* v : p.trainable_weights()) {
    EXPECT_TRUE(v->trainable()) << v->name();
    EXPECT_TRUE(v->value().is_trainable_variable()) << v->name() << ": tapes must watch it";
  }
  for (Variable* v : p.non_trainable_weights()) {
    EXPECT_FALSE(v->trainable()) << v->name();
    EXPECT_FALSE(v->value().is_trainable_variable()) << v->name();
  }
  EXPECT_EQ(p.count_params(), 5 * 2 + 2 + 5) << "non-trainable weights count too";
  // Each weight is initialised by its initializer.
  for (float x : p.weights()[1]->value().to_vector()) EXPECT_EQ(x, 0.0f);
  for (float x : p.weights()[2]->value().to_vector()) EXPECT_EQ(x, 1.0f);
  const std::vector<float> k = p.weights()[0]->value().to_vector();
  const float limit = std::sqrt(6.0f / 7.0f);
  bool varied = false;
  for (float x : k) {
    EXPECT_LE(std::fabs(x), limit);
    varied = varied || x != k[0];
  }
  EXPECT_TRUE(varied);
}

TEST(LayerCallTest, FirstCallBuildsFromTheShapeWithoutTheBatchAxis) {
  HostScope host_scope;
  Probe p("p");
  const Tensor x = testing::random_host({4, 3}, -1, 1, 1);
  const Tensor y = p(x, /*training=*/true);
  EXPECT_TRUE(p.built());
  EXPECT_EQ(p.input_shape(), (Shape{3}));
  EXPECT_EQ(p.weights()[0]->shape(), (Shape{3, 2}));
  EXPECT_EQ(p.calls, 1);
  EXPECT_TRUE(p.last_training);
  EXPECT_EQ(y.to_vector(), x.to_vector());
  p(x);
  EXPECT_FALSE(p.last_training) << "training defaults to false";
  EXPECT_EQ(p.builds, 1);
  // apply() with one input is the same call.
  const Tensor z = p.apply({x}, true);
  EXPECT_EQ(p.calls, 3);
  EXPECT_EQ(z.to_vector(), x.to_vector());
}

TEST(LayerCallTest, WeightsAreParametersAndOutputsAreActivationsOwnedByTheLayer) {
  Ledger ledger(DeviceSpec::custom(1, 0));
  DeviceContext ctx;
  ctx.ledger = &ledger;
  ctx.core = 0;
  ctx.owner = "caller";
  ContextScope scope(ctx);
  Probe p("p");
  const Tensor x = host({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor y = p(x);
  const CoreLedger& core = ledger.core(0);
  EXPECT_EQ(core.stat(Category::parameters).current, (3 * 2 + 2 + 3) * 4);
  EXPECT_EQ(core.stat(Category::activations).current, 2 * 3 * 4);
  std::set<std::string> owners;
  for (const LiveAllocation& a : core.live_allocations()) owners.insert(a.owner);
  EXPECT_EQ(owners, (std::set<std::string>{"p/kernel", "p/bias", "p/moving", "activation:p"}));
  EXPECT_EQ(device_context().owner, "caller") << "the call's owner is restored afterwards";
}

TEST(LayerCallTest, WeightsBuiltInAStrategyScopeAreMirrored) {
  ReplicatedStrategy s(DeviceSpec::custom(4, 0));
  Probe p("p");
  {
    auto scope = s.scope();
    p.build({10});
  }
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(s.ledger().core(c).stat(Category::parameters).current, (10 * 2 + 2 + 10) * 4) << "core " << c;
  }
  for (Variable* v : p.weights()) {  // one record of all four cores (CoreLedger::charge_all)
    ASSERT_EQ(v->value().storage().charges().size(), 1u) << v->name();
    EXPECT_TRUE(v->value().storage().charges()[0].all_cores) << v->name();
  }
}

TEST(LayerCallTest, SingleInputLayersRefuseSeveralOrNoInputs) {
  HostScope host_scope;
  const Tensor x = host({1, 2}, {1, 2});
  Probe unbuilt("u");
  EXPECT_THROW(unbuilt.apply({x, x}, false), std::invalid_argument);
  EXPECT_EQ(unbuilt.builds, 0);
  EXPECT_THROW(unbuilt.build_multi({}), std::invalid_argument);
  EXPECT_FALSE(unbuilt.built());
  Probe p("p");
  p.build({2});
  EXPECT_THROW(p.apply({x, x}, false), std::invalid_argument);
  EXPECT_EQ(p.calls, 0);
  EXPECT_THROW(p.compute_output_shape_multi({{2}, {2}}), std::invalid_argument);
  EXPECT_EQ(p.compute_output_shape_multi({{2}}), (Shape{2}));
}

TEST(LayerConfigTest, BaseConfigHasKerasKeys) {
  Probe p("p");
  EXPECT_EQ(p.get_config(), nlohmann::json::parse(R"({"name": "p", "trainable": true, "dtype": "float32"})"));
  EXPECT_FALSE(p.declared_input_shape().has_value());
  Probe q("q", Shape{28, 28});
  ASSERT_TRUE(q.declared_input_shape().has_value());
  EXPECT_EQ(*q.declared_input_shape(), (Shape{28, 28}));
  EXPECT_EQ(q.get_config(), nlohmann::json::parse(
                                R"({"name": "q", "trainable": true, "dtype": "float32", "batch_input_shape": [null, 28, 28]})"));
  EXPECT_FALSE(q.built()) << "declaring a shape does not build";
}

}  // namespace
}  // namespace keel
