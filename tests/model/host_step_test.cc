// A training step run as one host program for every replica (framework/model/host_step.cc) changes
// who computes what, never the numbers nor what each core is charged: models trained both ways end
// with the same weights and optimizer slots bit for bit, every step reports the same totals, and
// each core's ledger logs the same charges, releases and marks, holds the same peaks and counts the
// same transfers and FLOPs. The step is taken where the model and shards allow it, and only there.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "framework/core/random.h"
#include "framework/layers/core_layers.h"
#include "framework/model/planner.h"
#include "framework/train/losses.h"
#include "framework/train/optimizers.h"
#include "tests/support/training_cases.h"

namespace keel {
namespace {

// KEEL_HOST_PROGRAM=0 (the per-replica step) or unset for the scope's lifetime; unset after it.
class HostProgram {
 public:
  explicit HostProgram(bool on) {
    if (on) {
      unsetenv("KEEL_HOST_PROGRAM");
    } else {
      setenv("KEEL_HOST_PROGRAM", "0", 1);
    }
  }
  ~HostProgram() { unsetenv("KEEL_HOST_PROGRAM"); }
  HostProgram(const HostProgram&) = delete;
  HostProgram& operator=(const HostProgram&) = delete;
};

// What a run ends with, and what it went through.
struct HostStepRun {
  testing::TrainedState state;
  std::vector<StepTotals> steps;
  std::vector<std::optional<NonFiniteStep>> non_finite;
  std::vector<std::vector<LedgerEvent>> events;  // per core
  std::vector<TransferStat> transfers;
  std::vector<ComputeStat> compute;
  int64_t iterations = 0;
  int64_t strategy_step = 0;
  bool took_host_program = false;
};

// The seed MLP (Adam, one-hot labels) or a Flatten / Dense / Activation model of 28x28x1 images
// (SGD with momentum, class ids, top-5 accuracy too).
std::unique_ptr<Model> build_host_step_model(const testing::Case& c) {
  if (c.model == "mlp") return testing::build_compiled(c);
  std::unique_ptr<Model> m = std::make_unique<Sequential>(std::vector<LayerPtr>{
      Flatten(Shape{28, 28, 1}), Dense(48), Activation("relu"), Dense(10), Activation("softmax")});
  m->compile(std::make_shared<SGD>(SGD::Options{.learning_rate = 0.05f, .momentum = 0.9f}),
             std::make_shared<SparseCategoricalCrossentropy>(), {"accuracy", "sparse_top_k_categorical_accuracy"});
  return m;
}

// One-hot labels to class ids for the sparse model.
Batch host_step_batch(const testing::Case& c, uint64_t seed, float poison = 0.0f) {
  Batch b = testing::random_batch(c, seed);
  if (poison != 0.0f) b.images.data()[3] = poison;
  if (c.model == "mlp") return b;
  HostScope host;
  Tensor ids = Tensor::empty({b.size()});
  for (int64_t i = 0; i < b.size(); ++i) {
    const float* row = b.labels.data() + i * 10;
    ids.data()[i] = static_cast<float>(std::max_element(row, row + 10) - row);
  }
  return Batch{b.images, ids};
}

// `steps` steps: the odd ones through train_step (each shard a copy), the even ones on shards taken in
// place from their batch (distribute, as fit does); step `poisoned` with a NaN pixel.
HostStepRun train_host_step(const testing::Case& c, bool host_program, int host_threads, int steps, int poisoned = -1) {
  const HostProgram setting(host_program);
  clear_session();
  set_random_seed(11);
  ReplicatedStrategy strategy(c.device, ReplicatedStrategy::Options{.host_threads = host_threads});
  strategy.ledger().record_events(true);
  std::unique_ptr<Model> model;
  {
    auto scope = strategy.scope();
    model = build_host_step_model(c);
  }
  HostStepRun run;
  for (int s = 0; s < steps; ++s) {
    Batch b = host_step_batch(c, 700 + static_cast<uint64_t>(s), s == poisoned ? std::nanf("") : 0.0f);
    if (s % 2 == 1) {
      run.steps.push_back(model->train_step(b));
    } else {
      std::vector<Batch> shards = strategy.distribute(std::move(b));
      run.took_host_program = model->steps_as_host_program(shards);
      run.steps.push_back(model->train_step_on_cores(std::move(shards)));
    }
    run.non_finite.push_back(model->last_step_non_finite());
  }
  run.state = testing::trained_state(*model, strategy.ledger());
  for (int core = 0; core < strategy.ledger().num_cores(); ++core) {
    run.events.push_back(strategy.ledger().core(core).events());
    run.transfers.push_back(strategy.ledger().core(core).transfers());
    run.compute.push_back(strategy.ledger().core(core).compute());
  }
  run.iterations = model->optimizer().iterations();
  run.strategy_step = strategy.step();
  return run;
}

// Charges, releases, retags and marks in the same order, of the same bytes, categories and owners,
// with the same bytes in use after each. (A replica's loss is a scalar; the host program's is its
// element of the replicas' vector: the same 4 bytes, a shape of (1,) instead of ().)
void expect_same_ledger_events(const std::vector<LedgerEvent>& a, const std::vector<LedgerEvent>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string at = what + ", event " + std::to_string(i) + " (" + a[i].owner + ")";
    EXPECT_EQ(a[i].kind, b[i].kind) << at;
    EXPECT_EQ(a[i].bytes, b[i].bytes) << at;
    EXPECT_EQ(a[i].category, b[i].category) << at;
    EXPECT_EQ(a[i].owner, b[i].owner) << at;
    EXPECT_EQ(a[i].current, b[i].current) << at;
    if (a[i].bytes != 4) EXPECT_EQ(a[i].shape, b[i].shape) << at;
    if (::testing::Test::HasFailure()) return;  // one event's difference, not the thousands after it
  }
}

void expect_same_host_step_run(const HostStepRun& per_replica, const HostStepRun& host, const std::string& what) {
  EXPECT_FALSE(per_replica.took_host_program) << what;
  EXPECT_TRUE(host.took_host_program) << what;
  testing::expect_same_trained_state(per_replica.state, host.state, what);
  ASSERT_EQ(per_replica.steps.size(), host.steps.size());
  for (size_t s = 0; s < host.steps.size(); ++s) {
    const StepTotals &a = per_replica.steps[s], &b = host.steps[s];
    EXPECT_EQ(std::memcmp(&a.loss_sum, &b.loss_sum, sizeof(double)), 0) << what << ", step " << s << ": " << a.loss_sum << " " << b.loss_sum;
    EXPECT_EQ(a.correct, b.correct) << what << ", step " << s;
    EXPECT_EQ(a.in_top_k, b.in_top_k) << what << ", step " << s;
    EXPECT_EQ(a.samples, b.samples) << what << ", step " << s;
    EXPECT_EQ(per_replica.non_finite[s].has_value(), host.non_finite[s].has_value()) << what << ", step " << s;
    if (per_replica.non_finite[s] && host.non_finite[s]) {
      EXPECT_EQ(per_replica.non_finite[s]->describe(), host.non_finite[s]->describe()) << what;
    }
  }
  EXPECT_EQ(per_replica.iterations, host.iterations) << what;
  EXPECT_EQ(per_replica.strategy_step, host.strategy_step) << what;
  ASSERT_EQ(per_replica.events.size(), host.events.size());
  for (size_t c = 0; c < host.events.size(); ++c) {
    const std::string core = what + ", core " + std::to_string(c);
    expect_same_ledger_events(per_replica.events[c], host.events[c], core);
    const TransferStat &a = per_replica.transfers[c], &b = host.transfers[c];
    EXPECT_EQ(a.host_to_core_bytes, b.host_to_core_bytes) << core;
    EXPECT_EQ(a.core_to_host_bytes, b.core_to_host_bytes) << core;
    EXPECT_EQ(a.core_to_host_count, b.core_to_host_count) << core;
    EXPECT_EQ(a.sent_bytes, b.sent_bytes) << core;
    EXPECT_EQ(a.received_bytes, b.received_bytes) << core;
    EXPECT_EQ(a.collective_count, b.collective_count) << core;
    EXPECT_EQ(per_replica.compute[c].forward_flops, host.compute[c].forward_flops) << core;
  }
}

TEST(HostStep, SeedMlpOnV38IsThePerReplicaStepBitForBit) {
  const testing::Case c{"mlp", {784}, DeviceSpec::preset("v3-8"), 16};
  for (int threads : {1, 2}) {
    const std::string what = "v3-8 x 16, " + std::to_string(threads) + " thread(s)";
    expect_same_host_step_run(train_host_step(c, false, threads, 8), train_host_step(c, true, threads, 8), what);
  }
}

TEST(HostStep, FlattenAndActivationLayersSparseLabelsAndTopKOnTwoCores) {
  const testing::Case c{"flat", {28, 28, 1}, DeviceSpec::custom(2, 0), 32};
  expect_same_host_step_run(train_host_step(c, false, 2, 6), train_host_step(c, true, 2, 6), "custom:2 x 32");
}

TEST(HostStep, ANonFiniteStepIsSkippedAlike) {
  const testing::Case c{"mlp", {784}, DeviceSpec::custom(4, 0), 16};
  const HostStepRun on_host = train_host_step(c, true, 2, 5, /*poisoned=*/2);
  ASSERT_TRUE(on_host.non_finite[2].has_value());
  EXPECT_TRUE(on_host.non_finite[2]->update_skipped);
  EXPECT_EQ(on_host.iterations, 4);
  expect_same_host_step_run(train_host_step(c, false, 2, 5, 2), on_host, "custom:4 x 16, step 2 poisoned");
}

// Where a replica's rows would start off a tensor's alignment (rows not a multiple of 16), or they
// differ, or the model has a layer that does not treat each row alone, the step is the per-replica one.
TEST(HostStep, TakenOnlyWhereTheModelAndShardsAllowIt) {
  clear_session();
  ReplicatedStrategy strategy(DeviceSpec::preset("v3-8"));
  const testing::Case c{"mlp", {784}, DeviceSpec::preset("v3-8"), 16};
  std::unique_ptr<Model> mlp, dropout;
  {
    auto scope = strategy.scope();
    mlp = testing::build_compiled(c);
    dropout = std::make_unique<Sequential>(std::vector<LayerPtr>{Dense(32, "relu", Shape{784}), Dropout(0.5f), Dense(10, "softmax")});
    dropout->compile(std::make_shared<Adam>(), std::make_shared<CategoricalCrossentropy>());
  }
  EXPECT_TRUE(mlp->steps_as_host_program(strategy.distribute(testing::random_batch(c, 1))));
  EXPECT_TRUE(mlp->steps_as_host_program(strategy.distribute(testing::random_batch(c, 1, 256))));
  EXPECT_FALSE(mlp->steps_as_host_program(strategy.distribute(testing::random_batch(c, 1, 64)))) << "8 rows a replica";
  EXPECT_FALSE(mlp->steps_as_host_program(strategy.distribute(testing::random_batch(c, 1, 130)))) << "17 or 16 rows";
  EXPECT_FALSE(dropout->steps_as_host_program(strategy.distribute(testing::random_batch(c, 1))));
  {
    const HostProgram off(false);
    EXPECT_FALSE(mlp->steps_as_host_program(strategy.distribute(testing::random_batch(c, 1))));
  }
  ReplicatedStrategy one(DeviceSpec::preset("cpu"));
  std::unique_ptr<Model> alone;
  {
    auto scope = one.scope();
    alone = testing::build_compiled(c);
  }
  EXPECT_FALSE(alone->steps_as_host_program(one.distribute(testing::random_batch(c, 1, 128)))) << "one replica";
}

}  // namespace
}  // namespace keel
