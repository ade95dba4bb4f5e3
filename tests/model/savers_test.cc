// The memory savers (planner.h's Savers) change where bytes live and what is computed twice, never
// the numbers: with partitioned optimizer state and gradients (ZeRO 1 and 2,
// framework/device/sharding.h) and with remat (framework/model/remat.h), alone and together, the
// weights, Adam's slots and BatchNorm's moving statistics after many steps are bit-identical to the
// plain run's. Each core is charged its shard of the optimizer state (and of the gradients), remat
// saves fewer activations, and the planner's figures equal real steps' in every combination. Mixed
// precision (mixed_bfloat16) changes the numbers, but not under the other savers, and halves the
// activations.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "framework/core/random.h"
#include "framework/layers/initializers.h"
#include "framework/model/planner.h"
#include "framework/train/losses.h"
#include "models/zoo.h"
#include "tests/support/training_cases.h"

namespace keel {
namespace {

using testing::build_compiled;
using testing::Case;
using testing::random_batch;

struct Trained {
  std::vector<std::vector<float>> weights;  // every variable, then every slot
  std::vector<CoreMemory> memory;           // per core, over the whole run
};

// `steps` steps on fresh random batches, with the next batch in the prefetch slot as fit() has it.
Trained train(const Case& c, Savers savers, int steps) {
  clear_session();
  set_random_seed(11);
  ReplicatedStrategy strategy(c.device, ReplicatedStrategy::Options{.shard = savers.shard});
  std::unique_ptr<Model> model;
  {
    auto scope = strategy.scope();
    const mixed_precision::GlobalPolicyScope policy(savers.precision);
    model = build_compiled(c);
    model->set_remat(savers.remat);
    model->optimizer().build(model->trainable_variables());
  }
  for (int s = 0; s < steps; ++s) {
    const Batch batch = random_batch(c, 100 + static_cast<uint64_t>(s));
    const std::vector<Batch> slot = strategy.distribute(batch);
    model->train_step(batch);
  }
  Trained t;
  for (Variable* v : model->variables()) t.weights.push_back(v->value().to_vector());
  for (Variable* v : model->optimizer().slot_variables()) t.weights.push_back(v->value().to_vector());
  t.memory = core_memory(strategy.ledger());
  return t;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::string describe(const Savers& s) {
  return std::string("--shard ") + sharding_mode_name(s.shard) + " --remat " + remat_name(s.remat) + " --precision " +
         s.precision.name();
}

// Each combination ends bit-identical to the run with no saver in the combinations' precision.
void expect_same_bits(const Case& c, int steps, const std::vector<Savers>& combinations) {
  Savers reference;
  reference.precision = combinations.front().precision;
  const Trained plain = train(c, reference, steps);
  for (const Savers& savers : combinations) {
    const Trained other = train(c, savers, steps);
    ASSERT_EQ(other.weights.size(), plain.weights.size());
    for (size_t i = 0; i < plain.weights.size(); ++i) {
      EXPECT_TRUE(bitwise_equal(other.weights[i], plain.weights[i]))
          << c.model << " " << describe(savers) << ": weight or slot " << i << " differs";
    }
  }
}

const std::vector<Savers> kEverySaver = {{ShardingMode::optimizer, Remat::none},
                                         {ShardingMode::gradients, Remat::none},
                                         {ShardingMode::full, Remat::none},
                                         {ShardingMode::none, Remat::segments},
                                         {ShardingMode::gradients, Remat::segments},
                                         {ShardingMode::full, Remat::segments}};

TEST(Savers, MlpHundredStepsOnV38AreBitIdentical) {
  expect_same_bits({"mlp", {784}, DeviceSpec::preset("v3-8"), 4}, 100, kEverySaver);
}

// Three cores: shards of uneven sizes (the first cores take one element more).
TEST(Savers, MlpOnThreeCoresIsBitIdentical) {
  expect_same_bits({"mlp", {784}, DeviceSpec::custom(3, 0), 5}, 30, kEverySaver);
}

// BatchNormalization's moving statistics (variables too) are updated by the first pass only.
TEST(Savers, Resnet18TwentyStepsOnV38AreBitIdentical) {
  expect_same_bits({"resnet18", {32, 32, 1}, DeviceSpec::preset("v3-8"), 2}, 20, kEverySaver);
}

// Mixed precision changes the numbers (bfloat16 compute), the other savers still do not.
const mixed_precision::Policy kMixed("mixed_bfloat16");
const std::vector<Savers> kMixedSavers = {{ShardingMode::optimizer, Remat::none, kMixed},
                                          {ShardingMode::full, Remat::none, kMixed},
                                          {ShardingMode::none, Remat::segments, kMixed},
                                          {ShardingMode::gradients, Remat::segments, kMixed}};

TEST(Savers, MixedPrecisionMlpAndResnet18AreBitIdenticalUnderTheOtherSavers) {
  expect_same_bits({"mlp", {784}, DeviceSpec::preset("v3-8"), 4}, 30, kMixedSavers);
  expect_same_bits({"resnet18", {32, 32, 1}, DeviceSpec::preset("v3-8"), 2}, 8, kMixedSavers);
}

int64_t peak(const CoreMemory& m, Category k) { return m.category_peak[static_cast<size_t>(k)]; }

// mixed_bfloat16 keeps activations in 2 bytes: about half of float32's, less what stays float32
// (the model's input, softmax's output, BatchNorm's statistics, max pooling's offsets); variables,
// gradients and Adam's slots are float32 as before. With remat too, less again.
TEST(Savers, MixedPrecisionHalvesTheActivations) {
  const Case c{"resnet18", {32, 32, 1}, DeviceSpec::custom(2, 0), 8};
  const ModelFactory factory = [&] { return build_compiled(c); };
  clear_session();
  const MemoryPlan f32 = plan_training_step(factory, c.device, c.batch_per_core, {10});
  const MemoryPlan mixed = plan_training_step(factory, c.device, c.batch_per_core, {10}, {ShardingMode::none, Remat::none, kMixed});
  const MemoryPlan both = plan_training_step(factory, c.device, c.batch_per_core, {10}, {ShardingMode::none, Remat::segments, kMixed});
  const CoreMemory &p = f32.per_core[0], &m = mixed.per_core[0], &b = both.per_core[0];
  EXPECT_LE(peak(m, Category::activations), peak(p, Category::activations) * 53 / 100);
  EXPECT_GE(peak(m, Category::activations), peak(p, Category::activations) * 45 / 100);
  EXPECT_LT(peak(b, Category::activations), peak(m, Category::activations) * 60 / 100);
  for (Category k : {Category::parameters, Category::gradients, Category::optimizer}) {
    EXPECT_EQ(peak(m, k), peak(p, k)) << category_name(k) << " stay float32";
  }
  EXPECT_EQ(m.forward_flops, p.forward_flops);
}

// The bound: each core holds at most 1/8 of the replicated bytes plus 64 bytes per variable.
// ZeRO-2 lowers the peak where gradients are spread over many variables; for the MLP, whose one
// 784x128 kernel is 98.6% of its parameters, the whole gradient of that kernel (a temporary until
// it is reduce-scattered) and the reduce-scatter's receive buffer outweigh the shards it saves.
void expect_sharded_bounds(const Case& c, bool zero2_lowers_the_peak) {
  const ModelFactory factory = [&] { return build_compiled(c); };
  clear_session();
  const size_t vars = build_compiled(c)->trainable_variables().size();
  const MemoryPlan none = plan_training_step(factory, c.device, c.batch_per_core, {10});
  const MemoryPlan zero1 = plan_training_step(factory, c.device, c.batch_per_core, {10}, {ShardingMode::optimizer, Remat::none});
  const MemoryPlan zero2 = plan_training_step(factory, c.device, c.batch_per_core, {10}, {ShardingMode::gradients, Remat::none});
  const MemoryPlan zero3 = plan_training_step(factory, c.device, c.batch_per_core, {10}, {ShardingMode::full, Remat::none});
  const size_t all_vars = build_compiled(c)->variables().size();
  const int64_t n = c.device.cores, slack = 64 * static_cast<int64_t>(vars);
  for (int core = 0; core < c.device.cores; ++core) {
    const size_t i = static_cast<size_t>(core);
    const int64_t opt = peak(none.per_core[i], Category::optimizer), grad = peak(none.per_core[i], Category::gradients);
    EXPECT_LE(peak(zero1.per_core[i], Category::optimizer), opt / n + slack) << c.model << " core " << core;
    EXPECT_EQ(peak(zero1.per_core[i], Category::gradients), grad) << "ZeRO-1 keeps whole gradients";
    EXPECT_LE(peak(zero2.per_core[i], Category::optimizer), opt / n + slack) << c.model << " core " << core;
    EXPECT_LE(peak(zero2.per_core[i], Category::gradients), grad / n + slack) << c.model << " core " << core;
    EXPECT_EQ(peak(zero2.per_core[i], Category::parameters), peak(none.per_core[i], Category::parameters));
    // ZeRO-3: every weight (BatchNorm's moving statistics too) is sharded, and the gathered copies
    // are workspace that lives for one layer at a time.
    const int64_t params = peak(none.per_core[i], Category::parameters);
    EXPECT_LE(peak(zero3.per_core[i], Category::parameters), params / n + 64 * static_cast<int64_t>(all_vars)) << c.model;
    EXPECT_LE(peak(zero3.per_core[i], Category::gradients), grad / n + slack) << c.model;
    EXPECT_LE(peak(zero3.per_core[i], Category::optimizer), opt / n + slack) << c.model;
    if (zero2_lowers_the_peak) EXPECT_LT(zero3.per_core[i].peak, zero2.per_core[i].peak) << c.model << " core " << core;
    if (zero2_lowers_the_peak) EXPECT_LT(zero2.per_core[i].peak, zero1.per_core[i].peak) << c.model << " core " << core;
    EXPECT_LT(zero1.per_core[i].peak, none.per_core[i].peak);
  }
  // The updated shards travel to every core: ZeRO-1 moves more bytes between cores than mirroring.
  EXPECT_GT(zero1.per_core[0].sent_bytes, none.per_core[0].sent_bytes);
}

TEST(Savers, EachCoreHoldsItsShardOfSlotsAndGradients) {
  expect_sharded_bounds({"mlp", {784}, DeviceSpec::preset("v3-8"), 16}, false);
  expect_sharded_bounds({"resnet18", {32, 32, 1}, DeviceSpec::preset("v3-8"), 4}, true);
}

// Remat keeps fewer activations for backward and recomputes a share of the forward pass.
TEST(Savers, RematSavesActivationsAndCountsWhatItRecomputes) {
  // (The MLP gains nothing: its one hidden activation is the head's input, kept either way.)
  for (const Case& c : {Case{"resnet18", {32, 32, 1}, DeviceSpec::custom(2, 0), 8}}) {
    const ModelFactory factory = [&] { return build_compiled(c); };
    clear_session();
    const MemoryPlan plain = plan_training_step(factory, c.device, c.batch_per_core, {10});
    const MemoryPlan remat = plan_training_step(factory, c.device, c.batch_per_core, {10}, {ShardingMode::none, Remat::segments});
    const CoreMemory &p = plain.per_core[0], &r = remat.per_core[0];
    EXPECT_LT(peak(r, Category::activations), peak(p, Category::activations)) << c.model;
    EXPECT_EQ(peak(r, Category::parameters), peak(p, Category::parameters));
    EXPECT_EQ(p.recomputed_flops, 0);
    EXPECT_GT(r.recomputed_flops, 0) << c.model;
    EXPECT_EQ(r.forward_flops - r.recomputed_flops, p.forward_flops) << "the first pass computes what a plain one does";
    EXPECT_LT(r.recomputed_flops, p.forward_flops) << "the head is not recomputed";
  }
}

// The plan of each combination equals the peaks of real steps with it, per core and category.
TEST(Savers, PlanEqualsARealStepInEveryCombination) {
  std::vector<Savers> all = kEverySaver;
  all.push_back(Savers{});
  all.push_back(Savers{ShardingMode::none, Remat::none, kMixed});
  all.push_back(Savers{ShardingMode::none, Remat::full});
  all.push_back(Savers{ShardingMode::gradients, Remat::larger_than(4096), kMixed});
  all.push_back(Savers{ShardingMode::full, Remat::segments, kMixed});
  all.push_back(Savers{ShardingMode::gradients, Remat::none, kMixed});
  for (const Case& c : {Case{"mlp", {784}, DeviceSpec::preset("v3-8"), 4}, Case{"resnet18", {32, 32, 1}, DeviceSpec::custom(3, 0), 2}}) {
    for (const Savers& mode : all) {
      const Trained run = train(c, mode, 1);  // one step: slots built, the next batch in the slot
      clear_session();
      const MemoryPlan plan = plan_training_step([&] { return build_compiled(c); }, c.device, c.batch_per_core, {10}, mode);
      ASSERT_EQ(plan.per_core.size(), run.memory.size());
      for (size_t core = 0; core < run.memory.size(); ++core) {
        for (int k = 0; k < kNumCategories; ++k) {
          EXPECT_EQ(plan.per_core[core].category_peak[static_cast<size_t>(k)], run.memory[core].category_peak[static_cast<size_t>(k)])
              << c.model << " " << describe(mode) << " core " << core << " " << category_name(static_cast<Category>(k));
        }
        EXPECT_EQ(plan.per_core[core].peak, run.memory[core].peak) << c.model << " " << describe(mode) << " core " << core;
      }
    }
  }
}

}  // namespace
}  // namespace keel
