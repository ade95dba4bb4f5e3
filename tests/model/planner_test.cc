// The planner's figures equal what the ledger records in a real training step, byte for byte and
// category by category, because the plan *is* that step run on abstract tensors.
#include <gtest/gtest.h>

#include "framework/data/dataset.h"

#include "framework/core/limits.h"
#include "framework/core/random.h"
#include "framework/layers/initializers.h"
#include "framework/layers/layer.h"
#include "framework/model/planner.h"
#include "framework/train/losses.h"
#include "models/zoo.h"

namespace keel {
namespace {

std::unique_ptr<Model> build_compiled(const std::string& name) {
  std::unique_ptr<Model> model = zoo::build(name, {});
  model->compile(std::make_shared<Adam>(), std::make_shared<CategoricalCrossentropy>());
  return model;
}

// A real steady-state step on real data: slots built, then one train_step with peaks reset.
std::vector<CoreMemory> measure_real_step(const std::string& name, const DeviceSpec& device, int64_t batch_per_core,
                                          std::array<MemoryStat, kNumCategories>* core0_stats = nullptr) {
  clear_session();
  set_random_seed(3);
  ReplicatedStrategy strategy(device);
  std::unique_ptr<Model> model;
  {
    auto scope = strategy.scope();
    model = build_compiled(name);
    model->optimizer().build(model->trainable_variables());
  }
  const int64_t global = batch_per_core * device.cores;
  Batch batch;
  {
    HostScope host;
    batch.images = Tensor::empty({global, 784});
    batch.labels = Tensor::zeros({global, 10});
    Rng rng(7);
    for (int64_t i = 0; i < batch.images.size(); ++i) batch.images.data()[i] = rng.next_float();
    for (int64_t i = 0; i < global; ++i) batch.labels.data()[i * 10 + static_cast<int64_t>(rng.next_below(10))] = 1.0f;
  }
  const std::vector<Batch> slot = strategy.distribute(batch);  // the next batch, in the prefetch slot
  model->train_step(batch);
  if (core0_stats) {
    for (int k = 0; k < kNumCategories; ++k) (*core0_stats)[static_cast<size_t>(k)] = strategy.ledger().core(0).stat(static_cast<Category>(k));
  }
  return core_memory(strategy.ledger());
}

void expect_equal(const std::vector<CoreMemory>& planned, const std::vector<CoreMemory>& measured) {
  ASSERT_EQ(planned.size(), measured.size());
  for (size_t c = 0; c < planned.size(); ++c) {
    for (int k = 0; k < kNumCategories; ++k) {
      EXPECT_EQ(planned[c].category_peak[static_cast<size_t>(k)], measured[c].category_peak[static_cast<size_t>(k)])
          << "core " << c << " " << category_name(static_cast<Category>(k));
    }
    EXPECT_EQ(planned[c].peak, measured[c].peak) << "core " << c;
  }
}

TEST(Planner, PlanEqualsARealStepOnEveryCoreAndCategory) {
  for (const DeviceSpec& device : {DeviceSpec::preset("v3-8"), DeviceSpec::preset("cpu"), DeviceSpec::custom(3, 0)}) {
    for (int64_t batch : {1, 16, 33}) {
      const std::vector<CoreMemory> measured = measure_real_step("mlp", device, batch);
      clear_session();
      const MemoryPlan plan = plan_training_step([] { return build_compiled("mlp"); }, device, batch, {10});
      SCOPED_TRACE(device.name + " batch " + std::to_string(batch));
      expect_equal(plan.per_core, measured);
    }
  }
}

TEST(Planner, WideModelToo) {
  const DeviceSpec device = DeviceSpec::custom(2, 0);
  const std::vector<CoreMemory> measured = measure_real_step("mlp-wide", device, 8);
  const MemoryPlan plan = plan_training_step([] { return build_compiled("mlp-wide"); }, device, 8, {10});
  expect_equal(plan.per_core, measured);
  // 784*1024 + 1024 + 1024*10 + 10 parameters, 4 bytes each.
  EXPECT_EQ(plan.per_core[0].category_peak[static_cast<size_t>(Category::parameters)], (784 * 1024 + 1024 + 10240 + 10) * 4);
}

TEST(Planner, SeedMlpFigures) {
  const MemoryPlan plan =
      plan_training_step([] { return build_compiled("mlp"); }, DeviceSpec::preset("v3-8"), 16, {10});
  ASSERT_EQ(plan.per_core.size(), 8u);
  EXPECT_TRUE(plan.fits);
  for (const CoreMemory& m : plan.per_core) {
    EXPECT_EQ(m.category_peak[static_cast<size_t>(Category::parameters)], 407080);
    EXPECT_EQ(m.category_peak[static_cast<size_t>(Category::gradients)], 407080);
    EXPECT_EQ(m.category_peak[static_cast<size_t>(Category::optimizer)], 814160);
    // The step's batch and the next one in the prefetch slot.
    EXPECT_EQ(m.category_peak[static_cast<size_t>(Category::inputs)], 2 * 16 * (784 + 10) * 4);
  }
}

// The timeline is the planning ledger's own log: replayed, it reaches exactly the plan's peaks, and
// asking for it changes no figure.
TEST(Planner, TimelineReachesExactlyThePlansPeaks) {
  for (const DeviceSpec& device : {DeviceSpec::preset("v3-8"), DeviceSpec::preset("cpu")}) {
    const ModelFactory f = [] { return build_compiled("mlp"); };
    const MemoryPlan figures = plan_training_step(f, device, 16, {10});
    const MemoryPlan plan = plan_training_step(f, device, 16, {10}, {}, PlanDetail::timeline);
    EXPECT_TRUE(figures.timeline.empty());
    expect_equal(plan.per_core, figures.per_core);
    ASSERT_EQ(plan.timeline.size(), static_cast<size_t>(device.cores));
    for (size_t c = 0; c < plan.timeline.size(); ++c) {
      std::array<int64_t, kNumCategories> category_peak{};
      int64_t peak = 0;
      std::vector<std::string> marks;
      for (const LedgerEvent& e : plan.timeline[c]) {
        for (size_t k = 0; k < category_peak.size(); ++k) category_peak[k] = std::max(category_peak[k], e.current[k]);
        peak = std::max(peak, e.total);
        if (e.kind == LedgerEventKind::mark) marks.push_back(e.owner);
      }
      EXPECT_EQ(category_peak, plan.per_core[c].category_peak) << "core " << c;
      EXPECT_EQ(peak, plan.per_core[c].peak) << "core " << c;
      EXPECT_EQ(marks, (std::vector<std::string>{"build", "prefetch", "train_step", "forward", "backward", "apply_gradients"}));
      EXPECT_EQ(plan.timeline[c].front().owner, "build");
    }
  }
}

TEST(Planner, FitsFlipsExactlyWhereTheBudgetIsPassed) {
  const ModelFactory f = [] { return build_compiled("mlp"); };
  const MemoryPlan unlimited = plan_training_step(f, DeviceSpec::custom(2, 0), 64, {10});
  const int64_t peak = unlimited.per_core[0].peak;
  EXPECT_TRUE(plan_training_step(f, DeviceSpec::custom(2, peak), 64, {10}).fits);
  EXPECT_FALSE(plan_training_step(f, DeviceSpec::custom(2, peak - 1), 64, {10}).fits);
}

TEST(Planner, MaxBatchIsTheLargestThatFits) {
  const ModelFactory f = [] { return build_compiled("mlp"); };
  const DeviceSpec device = DeviceSpec::custom(2, 8 << 20);
  const int64_t max_batch = find_max_batch(f, device, {10});
  ASSERT_GT(max_batch, 0);
  EXPECT_TRUE(plan_training_step(f, device, max_batch, {10}).fits);
  EXPECT_FALSE(plan_training_step(f, device, max_batch + 1, {10}).fits);
  EXPECT_THROW(find_max_batch(f, DeviceSpec::preset("cpu"), {10}), std::invalid_argument);
  // The search stops at keel's per-core batch limit, 2^20, however large the budget.
  EXPECT_EQ(find_max_batch(f, DeviceSpec::custom(1, int64_t{1} << 50), {10}), kMaxBatchPerCore);
}

TEST(Planner, BatchesPastTheLimitAreRefused) {
  const ModelFactory f = [] { return build_compiled("mlp"); };
  for (int64_t batch : {int64_t{0}, kMaxBatchPerCore + 1, int64_t{1} << 62}) {
    EXPECT_THROW(plan_training_step(f, DeviceSpec::preset("v3-8"), batch, {10}), std::invalid_argument) << batch;
    EXPECT_THROW(check_training_step_fits(f, DeviceSpec::preset("v3-8"), batch, {10}), std::invalid_argument) << batch;
  }
}

// check_training_step_fits is the plan against the budget: it throws exactly where fits turns false,
// with the ledger's report, and nothing real is allocated.
TEST(Planner, CheckTrainingStepFitsThrowsTheLedgersReportWhereThePlanDoesNotFit) {
  const ModelFactory f = [] { return build_compiled("mlp"); };
  const int64_t peak = plan_training_step(f, DeviceSpec::custom(2, 0), 64, {10}).per_core[0].peak;
  EXPECT_NO_THROW(check_training_step_fits(f, DeviceSpec::custom(2, peak), 64, {10}));
  EXPECT_NO_THROW(check_training_step_fits(f, DeviceSpec::custom(2, 0), 64, {10}));
  try {
    check_training_step_fits(f, DeviceSpec::custom(2, peak - 1), 64, {10});
    ADD_FAILURE() << "a step one byte over the budget was accepted";
  } catch (const ResourceExhausted& e) {
    EXPECT_NE(std::string(e.what()).find("largest live allocations"), std::string::npos) << e.what();
  }
  // A model far past a core's HBM: refused from the plan, in bookkeeping only.
  const ModelFactory huge = [] {
    zoo::ModelOptions o;
    o.classes = 10000000;
    std::unique_ptr<Model> model = zoo::build("mlp", o);
    model->compile(std::make_shared<Adam>(), std::make_shared<CategoricalCrossentropy>());
    return model;
  };
  EXPECT_THROW(check_training_step_fits(huge, DeviceSpec::preset("v3-8"), 16, {10000000}), ResourceExhausted);
}

}  // namespace
}  // namespace keel

namespace keel {
namespace {

// ResNet50 at 64x64, 2 per core on 2 cores: small enough for a real step here.
void expect_resnet50_plan_equals_a_real_step(const Savers& savers) {
  const DeviceSpec device = DeviceSpec::custom(2, 0);
  auto factory = [] {
    std::unique_ptr<Model> m = zoo::build("resnet50", {{64, 64, 3}, 10});
    m->compile(std::make_shared<Adam>(), std::make_shared<CategoricalCrossentropy>());
    return m;
  };
  clear_session();
  set_random_seed(3);
  ReplicatedStrategy strategy(device);
  std::unique_ptr<Model> model;
  {
    auto scope = strategy.scope();
    const mixed_precision::GlobalPolicyScope policy(savers.precision);
    model = factory();
    model->set_remat(savers.remat);
    model->optimizer().build(model->trainable_variables());
  }
  Batch batch;
  {
    HostScope host;
    batch.images = Tensor::empty({4, 64, 64, 3});
    batch.labels = Tensor::zeros({4, 10});
    Rng rng(9);
    for (int64_t i = 0; i < batch.images.size(); ++i) batch.images.data()[i] = rng.next_float();
    for (int64_t i = 0; i < 4; ++i) batch.labels.data()[i * 10 + i] = 1.0f;
  }
  const std::vector<Batch> slot = strategy.distribute(batch);  // the next batch, in the prefetch slot
  model->train_step(batch);
  const std::vector<CoreMemory> measured = core_memory(strategy.ledger());
  clear_session();
  const MemoryPlan plan = plan_training_step(factory, device, 2, {10}, savers);
  expect_equal(plan.per_core, measured);
  EXPECT_EQ(plan.per_core[0].category_peak[static_cast<size_t>(Category::parameters)], 23608202 * 4);
}

TEST(Planner, Resnet50PlanEqualsARealStep) { expect_resnet50_plan_equals_a_real_step({}); }

// The same with bfloat16 activations and remat: what `keel memory --precision mixed_bfloat16
// --remat segments` reports for ResNet50 is a real step's.
TEST(Planner, MixedPrecisionResnet50PlanEqualsARealStep) {
  expect_resnet50_plan_equals_a_real_step({ShardingMode::none, Remat::none, mixed_precision::Policy("mixed_bfloat16")});
  expect_resnet50_plan_equals_a_real_step({ShardingMode::none, Remat::segments, mixed_precision::Policy("mixed_bfloat16")});
}

// The plan against fit() itself: several steps from a real dataset, with the next batch in each
// core's prefetch slot while a step runs; the peaks over the whole run equal the steady-state plan.
// On `cpu` fit's batches become the core's shards without a copy (distribute(Batch&&)), charged as
// the plan's copies are.
TEST(Planner, PlanEqualsThePeaksOfFit) {
  for (const DeviceSpec& device : {DeviceSpec::preset("v3-8"), DeviceSpec::preset("cpu")}) {
    SCOPED_TRACE(device.name);
    const int64_t per_core = device.cores == 1 ? 128 : 16, global = per_core * device.cores, n = 4 * global + 7;
    clear_session();
    set_random_seed(3);
    ReplicatedStrategy strategy(device);
    std::unique_ptr<Model> model;
    {
      auto scope = strategy.scope();
      model = build_compiled("mlp");
    }
    Tensor x, y;
    {
      HostScope host;
      x = Tensor::empty({n, 784});
      y = Tensor::zeros({n, 10});
      Rng rng(5);
      for (int64_t i = 0; i < x.size(); ++i) x.data()[i] = rng.next_float();
      for (int64_t i = 0; i < n; ++i) y.data()[i * 10 + static_cast<int64_t>(rng.next_below(10))] = 1.0f;
    }
    const Dataset data = Dataset::from_tensor_slices({x, y}).shuffle(n, 1).batch(global, true).prefetch(AUTOTUNE);
    FitOptions options;
    options.epochs = 2;
    model->fit(data, options);
    const std::vector<CoreMemory> measured = core_memory(strategy.ledger());
    ASSERT_EQ(model->optimizer().iterations(), 8);
    clear_session();
    const MemoryPlan plan = plan_training_step([] { return build_compiled("mlp"); }, device, per_core, {10});
    expect_equal(plan.per_core, measured);
    // The collectives' traffic of one planned step is that of each of fit's 8 steps.
    for (int c = 0; c < device.cores; ++c) {
      const TransferStat t = strategy.ledger().core(c).transfers();
      EXPECT_EQ(t.sent_bytes, 8 * plan.per_core[static_cast<size_t>(c)].sent_bytes) << c;
      EXPECT_EQ(t.received_bytes, 8 * plan.per_core[static_cast<size_t>(c)].received_bytes) << c;
      // Every batch moved to the cores is counted, copied or not: the 8 steps'.
      EXPECT_EQ(t.host_to_core_bytes, 8 * per_core * (784 + 10) * 4) << c;
    }
    // Two batches of inputs: the step's and the slot's.
    EXPECT_EQ(plan.per_core[0].category_peak[static_cast<size_t>(Category::inputs)], 2 * per_core * (784 + 10) * 4);
    if (device.cores == 1) continue;
    // Core 0 of v3-8's tree has children 1, 2 and 4: the gradients (407,080 bytes) go up and down
    // each link once; core 7 is a leaf.
    EXPECT_EQ(plan.per_core[0].sent_bytes, 3 * 407080);
    EXPECT_EQ(plan.per_core[7].sent_bytes, 407080);
  }
}

}  // namespace
}  // namespace keel
