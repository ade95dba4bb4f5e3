// Explicit placement (framework/device/layout.h): a LayoutMap that splits Dense kernels along their
// output axis (and their biases) makes those layers column-parallel — each core computes its columns
// for every replica's rows — and changes where bytes live, never the numbers: weights and Adam's
// slots after many steps are bit-identical to the replicated run's; each core holds, updates and
// keeps slots for its columns only; the planner's figures equal a real step's.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "framework/core/random.h"
#include "framework/device/layout.h"
#include "framework/layers/initializers.h"
#include "framework/model/planner.h"
#include "framework/train/losses.h"
#include "models/zoo.h"
#include "tests/support/training_cases.h"

namespace keel {
namespace {

using distribution::LayoutMap;
using distribution::TensorLayout;

using testing::build_compiled;
using testing::Case;
using testing::random_batch;

std::shared_ptr<const LayoutMap> layout(const std::vector<std::string>& specs) {
  if (specs.empty()) return nullptr;
  return std::make_shared<const LayoutMap>(LayoutMap::from_specs(specs));
}

ReplicatedStrategy::Options options_with(const std::vector<std::string>& specs) {
  ReplicatedStrategy::Options options;
  options.layout_map = layout(specs);
  return options;
}

// The case's model built in the strategy's scope from seed 11, with its optimizer's slots.
std::unique_ptr<Model> build_in(ReplicatedStrategy& strategy, const Case& c, Remat remat) {
  clear_session();
  set_random_seed(11);
  auto scope = strategy.scope();
  std::unique_ptr<Model> model = build_compiled(c);
  model->set_remat(remat);
  model->optimizer().build(model->trainable_variables());
  return model;
}

struct LayoutTrained {
  std::vector<std::vector<float>> values;  // every variable, then every slot
  std::vector<CoreMemory> memory;
};

// `steps` steps of fresh random batches; `ragged` makes every other global batch one row short of
// the cores' multiple, so the replicas hold different numbers of rows.
LayoutTrained train(const Case& c, const std::vector<std::string>& specs, int steps, bool ragged = false, Remat remat = Remat::none) {
  ReplicatedStrategy strategy(c.device, options_with(specs));
  const std::unique_ptr<Model> model = build_in(strategy, c, remat);
  int laid_out = 0;
  for (Variable* v : model->variables()) laid_out += v->sharded_axis() >= 0 ? 1 : 0;
  EXPECT_EQ(laid_out > 0, !specs.empty()) << "the layout must split some variable (else the test compares nothing)";
  for (int s = 0; s < steps; ++s) {
    const int64_t rows = c.batch_per_core * c.device.cores - (ragged && s % 2 == 1 ? 1 : 0);
    const Batch batch = random_batch(c, 100 + static_cast<uint64_t>(s), rows);
    const std::vector<Batch> slot = strategy.distribute(batch);
    model->train_step(batch);
  }
  LayoutTrained t;
  for (Variable* v : model->variables()) t.values.push_back(v->value().to_vector());
  for (Variable* v : model->optimizer().slot_variables()) t.values.push_back(v->value().to_vector());
  t.memory = core_memory(strategy.ledger());
  return t;
}

void expect_same_bits(const Case& c, int steps, const std::vector<std::string>& specs, bool ragged = false,
                      Remat remat = Remat::none) {
  const LayoutTrained plain = train(c, {}, steps, ragged);
  const LayoutTrained laid_out = train(c, specs, steps, ragged, remat);
  ASSERT_EQ(laid_out.values.size(), plain.values.size());
  for (size_t i = 0; i < plain.values.size(); ++i) {
    const std::vector<float>&a = plain.values[i], &b = laid_out.values[i];
    EXPECT_TRUE(a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0)
        << c.model << " on " << c.device.name << ": variable or slot " << i << " differs";
  }
}

const std::vector<std::string> kColumns = {"dense.*kernel=None,model", "dense.*bias=model"};

TEST(Layout, ColumnParallelMlpIsBitIdenticalToReplicated) {
  expect_same_bits({"mlp", {784}, DeviceSpec::preset("v3-8"), 4}, 40, kColumns);
}

// Three cores: 128 columns split 43/43/42; replicas with different rows; the biases replicated.
TEST(Layout, UnevenColumnsAndRowsAndAReplicatedBiasAreBitIdentical) {
  expect_same_bits({"mlp", {784}, DeviceSpec::custom(3, 0), 5}, 20, kColumns, /*ragged=*/true);
  expect_same_bits({"mlp", {784}, DeviceSpec::custom(3, 0), 5}, 10, {"dense.*kernel=(None, model)"});
}

// Only the ResNet's head is laid out; BatchNormalization and convolutions stay replicated.
TEST(Layout, Resnet18WithAColumnParallelHeadIsBitIdentical) {
  expect_same_bits({"resnet18", {32, 32, 1}, DeviceSpec::custom(2, 0), 2}, 4, {"predictions/kernel=None,model"});
}

// A custom loop (tape.gradient, then apply_gradients) hands the optimizer each laid-out kernel's
// stack of every replica's gradient; it reduces it as fit() does, to the same bits.
TEST(Layout, ACustomLoopTrainsToTheSameBits) {
  const Case c{"mlp", {784}, DeviceSpec::custom(3, 0), 4};
  const auto run_loop = [&](const std::vector<std::string>& specs) {
    ReplicatedStrategy strategy(c.device, options_with(specs));
    const std::unique_ptr<Model> model = build_in(strategy, c, Remat::none);
    const std::vector<Variable*> vars = model->trainable_variables();
    for (int s = 0; s < 5; ++s) {
      strategy.run_distributed(
          [&](const Batch& b) {
            GradientTape tape;
            const Tensor loss = model->loss()(b.labels, (*model)(b.images, /*training=*/true));
            std::vector<Tensor> grads = tape.gradient(loss, vars);
            if (!specs.empty()) EXPECT_EQ(grads[0].rank(), 3) << "the kernel's gradient is a stack";
            model->optimizer().apply_gradients(std::move(grads), vars);
            return 0;
          },
          random_batch(c, 200 + static_cast<uint64_t>(s), 12));
    }
    std::vector<std::vector<float>> values;
    for (Variable* v : model->variables()) values.push_back(v->value().to_vector());
    for (Variable* v : model->optimizer().slot_variables()) values.push_back(v->value().to_vector());
    return values;
  };
  const std::vector<std::vector<float>> laid_out = run_loop(kColumns), plain = run_loop({});
  ASSERT_EQ(laid_out.size(), plain.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(laid_out[i].size() == plain[i].size() &&
                std::memcmp(laid_out[i].data(), plain[i].data(), plain[i].size() * sizeof(float)) == 0)
        << "variable or slot " << i;
  }
}

// Under mixed_bfloat16 the column-parallel layer rounds its operands and outputs as matmul and
// bias_add do, so the bits still match (and differ from float32's: the policy is in force).
TEST(Layout, MixedPrecisionIsBitIdentical) {
  const Case c{"mlp", {784}, DeviceSpec::preset("v3-8"), 4};
  const LayoutTrained f32 = train(c, kColumns, 3);
  const mixed_precision::GlobalPolicyScope policy(mixed_precision::Policy("mixed_bfloat16"));
  EXPECT_NE(train(c, kColumns, 3).values, f32.values) << "mixed precision must change the numbers";
  expect_same_bits(c, 12, kColumns);
  expect_same_bits({"mlp", {784}, DeviceSpec::custom(3, 0), 5}, 8, kColumns, /*ragged=*/true);
}

// Remat recomputes a column-parallel layer's forward pass in backward, exchanges and all.
TEST(Layout, UnderRematIsBitIdentical) {
  expect_same_bits({"mlp", {784}, DeviceSpec::preset("v3-8"), 4}, 10, kColumns, false, Remat::full);
  expect_same_bits({"resnet18", {32, 32, 1}, DeviceSpec::custom(2, 0), 2}, 3, {"predictions/kernel=None,model"}, false,
                   Remat::segments);
}

int64_t layout_peak(const CoreMemory& m, Category k) { return m.category_peak[static_cast<size_t>(k)]; }

// Each core holds its columns of every laid-out variable (shard_range of the output axis), their two
// Adam slots and their gradients, nothing more of them; the peak falls, and the bytes between cores
// count the exchanges.
TEST(Layout, EachCoreHoldsItsColumns) {
  const Case c{"mlp", {784}, DeviceSpec::preset("v3-8"), 16};
  const ModelFactory factory = [&] { return build_compiled(c); };
  clear_session();
  const MemoryPlan plain = plan_training_step(factory, c.device, c.batch_per_core, {10});
  Savers savers;
  savers.layout = layout(kColumns);
  const MemoryPlan columns = plan_training_step(factory, c.device, c.batch_per_core, {10}, savers);
  for (int core = 0; core < c.device.cores; ++core) {
    const CoreMemory &p = plain.per_core[static_cast<size_t>(core)], &l = columns.per_core[static_cast<size_t>(core)];
    // The MLP: dense (784, 128) and dense_1 (128, 10), both with biases, every one laid out.
    const int64_t hidden = shard_range(128, 8, core).size(), out = shard_range(10, 8, core).size();
    const int64_t block_bytes = 4 * ((784 + 1) * hidden + (128 + 1) * out);
    EXPECT_EQ(layout_peak(l, Category::parameters), block_bytes) << "core " << core;
    EXPECT_EQ(layout_peak(l, Category::optimizer), 2 * block_bytes) << "core " << core;
    EXPECT_EQ(layout_peak(l, Category::gradients), block_bytes) << "core " << core;
    EXPECT_LE(layout_peak(l, Category::parameters), layout_peak(p, Category::parameters) / 8 + 4 * 129) << "a column more at most";
    EXPECT_LT(l.peak, p.peak) << "core " << core;
  }
}

// The plan equals the peaks of a real step, per core and category.
TEST(Layout, PlanEqualsARealStep) {
  for (const bool mixed : {false, true}) {
  for (const Case& c : {Case{"mlp", {784}, DeviceSpec::preset("v3-8"), 4}, Case{"mlp", {784}, DeviceSpec::custom(3, 0), 3}}) {
    const mixed_precision::Policy policy(mixed ? "mixed_bfloat16" : "float32");
    LayoutTrained run;
    {
      const mixed_precision::GlobalPolicyScope scope(policy);
      run = train(c, kColumns, 1);
    }
    clear_session();
    Savers savers;
    savers.precision = policy;
    savers.layout = layout(kColumns);
    const MemoryPlan plan = plan_training_step([&] { return build_compiled(c); }, c.device, c.batch_per_core, {10}, savers);
    ASSERT_EQ(plan.per_core.size(), run.memory.size());
    for (size_t core = 0; core < run.memory.size(); ++core) {
      for (int k = 0; k < kNumCategories; ++k) {
        EXPECT_EQ(plan.per_core[core].category_peak[static_cast<size_t>(k)], run.memory[core].category_peak[static_cast<size_t>(k)])
            << c.device.name << " core " << core << " " << category_name(static_cast<Category>(k));
      }
      EXPECT_EQ(plan.per_core[core].peak, run.memory[core].peak) << c.device.name << " core " << core << " mixed " << mixed;
    }
  }
  }
}

// Keras's LayoutMap.__getitem__: an equal key first, else the one pattern that regex-searches the path.
TEST(LayoutMapTest, FindsKerasStyle) {
  LayoutMap map;
  map["dense.*kernel"] = {"None", "model"};
  map["dense_1/bias"] = {"model"};
  map["bias"] = {"None"};
  EXPECT_EQ(map.find("dense/kernel")->sharded_axis(), 1);
  EXPECT_EQ(map.find("dense_1/kernel")->sharded_axis(), 1);
  EXPECT_EQ(map.find("dense_1/bias")->sharded_axis(), 0) << "the equal key wins over the pattern 'bias'";
  EXPECT_EQ(map.find("dense/bias")->sharded_axis(), -1);
  EXPECT_FALSE(map.find("conv2d/gamma").has_value());
  map["kernel$"] = {"model", "None"};
  EXPECT_THROW(map.find("dense/kernel"), std::invalid_argument) << "two patterns match";
  EXPECT_EQ(map.specs(), (std::vector<std::string>{"dense.*kernel=None,model", "dense_1/bias=model", "bias=None",
                                                    "kernel$=model,None"}));
}

TEST(LayoutMapTest, RefusesBadSpecsNamingThem) {
  for (const std::string spec : {"dense.*kernel", "dense=None,batch", "dense=model,model", "(=None,model", "=model",
                                 "dense=", "dense=None,None,None,None,None,None,None,None,model"}) {
    try {
      LayoutMap::from_specs({spec});
      ADD_FAILURE() << spec << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_LT(std::string(e.what()).size(), 400u) << e.what();
    }
  }
  EXPECT_EQ(LayoutMap::from_specs({"d=( None , model )"}).find("d")->axes, (std::vector<std::string>{"None", "model"}));
}

// A layout keel cannot compute with is refused when the layer builds the variable, naming it.
TEST(Layout, RefusesWhatItCannotComputeNamingTheVariable) {
  const auto build_in = [](const std::vector<std::string>& specs, const Case& c) {
    clear_session();
    ReplicatedStrategy::Options options;
    options.layout_map = layout(specs);
    ReplicatedStrategy strategy(c.device, options);
    auto scope = strategy.scope();
    build_compiled(c)->build(c.input);
  };
  const Case resnet{"resnet18", {32, 32, 1}, DeviceSpec::custom(2, 0), 2}, mlp{"mlp", {784}, DeviceSpec::custom(2, 0), 2};
  EXPECT_THROW(build_in({"conv1_conv/kernel=None,None,None,model"}, resnet), std::invalid_argument);
  EXPECT_THROW(build_in({"dense/kernel=model,None"}, mlp), std::invalid_argument) << "row-parallel is not built";
  EXPECT_THROW(build_in({"dense/bias=model"}, mlp), std::invalid_argument) << "a split bias needs a split kernel";
  EXPECT_THROW(build_in({"dense/kernel=None,None,model"}, mlp), std::invalid_argument) << "rank";
  ReplicatedStrategy::Options sharded;
  sharded.layout_map = layout(kColumns);
  sharded.shard = ShardingMode::optimizer;
  EXPECT_THROW(ReplicatedStrategy(DeviceSpec::custom(2, 0), sharded), std::invalid_argument);
}

// all_to_all cuts rows one way and columns the other, with uneven pieces, and its inverse restores.
TEST(Layout, AllToAllExchangesBlocks) {
  ReplicatedStrategy strategy(DeviceSpec::custom(3, 0));
  const std::vector<int64_t> rows = {2, 1, 3}, cols = {3, 3, 2};
  const std::vector<Batch> none(3);
  strategy.run(
      [&](const Batch&) {
        ReplicaContext& ctx = *current_replica_context();
        const int r = ctx.replica_id();
        Tensor mine = Tensor::empty({rows[static_cast<size_t>(r)], 8});  // this replica's rows, every column
        for (int64_t i = 0; i < mine.size(); ++i) mine.data()[i] = static_cast<float>(100 * r + i);
        const Tensor by_columns = ctx.all_to_all(mine, 1, cols);  // every replica's rows, my columns
        const int64_t width = cols[static_cast<size_t>(r)], first_col = 3 * r;  // cols: 3, 3, 2
        EXPECT_EQ(by_columns.shape(), (Shape{6, width}));
        for (int64_t row = 0, source = 0, local = 0; row < 6; ++row, ++local) {
          if (local == rows[static_cast<size_t>(source)]) source += 1, local = 0;
          for (int64_t j = 0; j < width; ++j) {
            EXPECT_EQ(by_columns.data()[row * width + j], static_cast<float>(100 * source + local * 8 + first_col + j))
                << "replica " << r << " row " << row << " column " << j;
          }
        }
        const Tensor back = ctx.all_to_all(by_columns, 0, rows);
        EXPECT_EQ(back.to_vector(), mine.to_vector()) << "replica " << r;
        return 0;
      },
      none);
}

}  // namespace
}  // namespace keel
