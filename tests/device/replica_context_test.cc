// ReplicaContext: a replica's identity and step, the keys of its random streams, the thread's current
// context, and the replica-local state it marks for syncing at the end of a run.
#include "framework/device/replica_context.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "framework/device/strategy.h"

namespace keel {
namespace {

TEST(ReplicaContextTest, KnowsItsStrategyReplicaCountAndStep) {
  ReplicatedStrategy s(DeviceSpec::custom(4, 0));
  const ReplicaContext ctx(s, nullptr, 3, 4, 17);
  EXPECT_EQ(&ctx.strategy(), &s);
  EXPECT_EQ(ctx.replica_id(), 3);
  EXPECT_EQ(ctx.num_replicas(), 4);
  EXPECT_EQ(ctx.step(), 17);
  EXPECT_TRUE(ctx.marked_for_sync().empty());
}

TEST(ReplicaContextTest, RandomKeyIsAFunctionOfOpStepAndReplicaOnly) {
  ReplicatedStrategy a(DeviceSpec::custom(8, 0));
  ReplicatedStrategy b(DeviceSpec::custom(2, 0));
  InProcessCollectives collectives(a.ledger(), 8, [](int) {});
  // The same (op, step, replica) gives the same key whatever the strategy, the number of replicas
  // or whether collectives are available.
  const ReplicaContext x(a, &collectives, 1, 8, 5);
  const ReplicaContext y(b, nullptr, 1, 2, 5);
  for (uint64_t op : {0ull, 1ull, 42ull, 0xdeadbeefull}) EXPECT_EQ(x.random_key(op), y.random_key(op)) << op;
  // Calling it does not advance anything: it is a pure function.
  EXPECT_EQ(x.random_key(42), x.random_key(42));
}

TEST(ReplicaContextTest, RandomKeysDifferAcrossOpsStepsAndReplicas) {
  ReplicatedStrategy s(DeviceSpec::custom(4, 0));
  std::set<uint64_t> keys;
  int count = 0;
  for (int64_t step : {0, 1, 2, 1000}) {
    for (int replica = 0; replica < 4; ++replica) {
      const ReplicaContext ctx(s, nullptr, replica, 4, step);
      for (uint64_t op : {0ull, 1ull, 2ull, 7ull}) {
        keys.insert(ctx.random_key(op));
        ++count;
      }
    }
  }
  EXPECT_EQ(keys.size(), static_cast<size_t>(count)) << "two (op, step, replica) triples drew the same stream";
  // The key is not the op key itself, nor symmetric in step and replica.
  const ReplicaContext r0(s, nullptr, 0, 4, 0);
  EXPECT_NE(r0.random_key(7), 7u);
  const ReplicaContext s1r2(s, nullptr, 2, 4, 1), s2r1(s, nullptr, 1, 4, 2);
  EXPECT_NE(s1r2.random_key(7), s2r1.random_key(7));
}

TEST(ReplicaContextTest, RunGivesEachReplicaTheStrategyStepAndItsOwnKeys) {
  ReplicatedStrategy s(DeviceSpec::custom(4, 0));
  s.set_step(9);
  std::vector<Batch> shards(4);
  for (int run = 0; run < 2; ++run) {
    const std::vector<std::pair<int64_t, uint64_t>> seen = s.run(
        [](const Batch&) {
          const ReplicaContext* ctx = current_replica_context();
          return std::make_pair(ctx->step(), ctx->random_key(123));
        },
        shards);
    ASSERT_EQ(seen.size(), 4u);
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(seen[static_cast<size_t>(r)].first, 9 + run) << "replica " << r;
      // A context built by hand for the same (step, replica) draws the same stream as the run's.
      const ReplicaContext same(s, nullptr, r, 4, 9 + run);
      EXPECT_EQ(seen[static_cast<size_t>(r)].second, same.random_key(123)) << "replica " << r;
    }
  }
  EXPECT_EQ(s.step(), 11) << "each run advances the step by one";
}

TEST(ReplicaContextTest, CurrentContextIsPerThreadAndScoped) {
  ReplicatedStrategy s(DeviceSpec::custom(2, 0));
  EXPECT_EQ(current_replica_context(), nullptr);
  ReplicaContext outer(s, nullptr, 0, 2, 0);
  ReplicaContext inner(s, nullptr, 1, 2, 0);
  {
    ReplicaContextScope a(&outer);
    EXPECT_EQ(current_replica_context(), &outer);
    {
      ReplicaContextScope b(&inner);
      EXPECT_EQ(current_replica_context(), &inner);
      const ReplicaContext* on_other_thread = &outer;
      std::thread t([&] { on_other_thread = current_replica_context(); });
      t.join();
      EXPECT_EQ(on_other_thread, nullptr) << "another thread has no replica context";
    }
    EXPECT_EQ(current_replica_context(), &outer);
  }
  EXPECT_EQ(current_replica_context(), nullptr);
}

TEST(ReplicaContextTest, CrossReplicaCallsWithoutCollectivesThrowLogicError) {
  ReplicatedStrategy s(DeviceSpec::custom(2, 0));
  ReplicaContext ctx(s, nullptr, 0, 2, 0);
  std::vector<Tensor> values = {Tensor::scalar(1.0f)};
  EXPECT_THROW(ctx.all_reduce(ReduceOp::Sum, values), std::logic_error);
  EXPECT_THROW(ctx.barrier(), std::logic_error);
  EXPECT_THROW(ctx.all_gather(values[0]), std::logic_error);
  EXPECT_THROW(ctx.reduce_scatter(ReduceOp::Mean, values[0]), std::logic_error);
  EXPECT_THROW(ctx.broadcast(values[0], 0), std::logic_error);
  EXPECT_THROW(ctx.merge_call([] {}), std::logic_error) << "two replicas must meet for a merge_call";
}

TEST(ReplicaContextTest, MergeCallOfOneReplicaRunsOnceInTheMirroredContext) {
  ReplicatedStrategy s(DeviceSpec::custom(3, 0));
  ReplicaContext ctx(s, nullptr, 0, 1, 0);
  int calls = 0;
  DeviceContext seen;
  Tensor made;
  ctx.merge_call([&] {
    ++calls;
    seen = device_context();
    made = Tensor::zeros({5});
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen.ledger, &s.ledger());
  EXPECT_EQ(seen.core, -1) << "new tensors are mirrored";
  EXPECT_EQ(seen.category, Category::parameters);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(s.ledger().core(c).stat(Category::parameters).current, 20) << c;
  EXPECT_EQ(device_context().ledger, nullptr) << "the caller's context is restored";
}

class CountingState : public ReplicaLocalState {
 public:
  explicit CountingState(std::vector<std::pair<int, uint64_t>>* log, std::mutex* mu) : log_(log), mu_(mu) {}
  std::vector<Tensor> replica_contributions(ReplicaContext& ctx) override {
    std::lock_guard<std::mutex> lock(*mu_);
    log_->emplace_back(ctx.replica_id(), creation_order());
    return {};
  }
  void take_means(ReplicaContext&, std::span<Tensor> means) override { EXPECT_TRUE(means.empty()); }

 private:
  std::vector<std::pair<int, uint64_t>>* log_;
  std::mutex* mu_;
};

TEST(ReplicaLocalStateTest, CreationOrderIncreasesWithEachNewState) {
  std::vector<std::pair<int, uint64_t>> log;
  std::mutex mu;
  CountingState a(&log, &mu);
  CountingState b(&log, &mu);
  auto c = std::make_unique<CountingState>(&log, &mu);
  EXPECT_LT(a.creation_order(), b.creation_order());
  EXPECT_LT(b.creation_order(), c->creation_order());
  EXPECT_EQ(a.creation_order(), a.creation_order()) << "fixed once created";
}

TEST(ReplicaLocalStateTest, MarkForSyncKeepsEachStateOnceInMarkingOrder) {
  ReplicatedStrategy s(DeviceSpec::custom(1, 0));
  InProcessCollectives collectives(s.ledger(), 1, [](int) {});
  std::vector<std::pair<int, uint64_t>> log;
  std::mutex mu;
  CountingState a(&log, &mu), b(&log, &mu);
  ReplicaContext ctx(s, &collectives, 0, 1, 0);
  ctx.mark_for_sync(&b);
  ctx.mark_for_sync(&a);
  ctx.mark_for_sync(&b);
  ASSERT_EQ(ctx.marked_for_sync().size(), 2u);
  EXPECT_EQ(ctx.marked_for_sync()[0], &b);
  EXPECT_EQ(ctx.marked_for_sync()[1], &a);
  EXPECT_TRUE(log.empty()) << "marking syncs nothing by itself";
}

TEST(ReplicaLocalStateTest, MarkingWhereReplicasCannotCombineThrowsLogicError) {
  ReplicatedStrategy s(DeviceSpec::custom(2, 0));
  std::vector<std::pair<int, uint64_t>> log;
  std::mutex mu;
  CountingState a(&log, &mu);
  ReplicaContext ctx(s, nullptr, 0, 2, 0);
  EXPECT_THROW(ctx.mark_for_sync(&a), std::logic_error);
  EXPECT_TRUE(ctx.marked_for_sync().empty());
  // The same inside for_each_replica, where replicas may not wait for each other.
  EXPECT_THROW(s.for_each_replica([&](int) { current_replica_context()->mark_for_sync(&a); }), std::logic_error);
}

TEST(ReplicaLocalStateTest, RunSyncsEveryMarkedStateOnEveryReplicaInCreationOrder) {
  ReplicatedStrategy s(DeviceSpec::custom(4, 0));
  std::vector<std::pair<int, uint64_t>> log;
  std::mutex mu;
  CountingState first(&log, &mu), second(&log, &mu), third(&log, &mu), unmarked(&log, &mu);
  std::vector<Batch> shards(4);
  // Replicas mark different subsets in different orders; `second` is marked by replica 1 only,
  // twice, and `third` before `first` on replica 2.
  s.run(
      [&](const Batch&) {
        ReplicaContext* ctx = current_replica_context();
        switch (ctx->replica_id()) {
          case 0: ctx->mark_for_sync(&first); break;
          case 1:
            ctx->mark_for_sync(&second);
            ctx->mark_for_sync(&second);
            break;
          case 2:
            ctx->mark_for_sync(&third);
            ctx->mark_for_sync(&first);
            break;
          default: break;  // replica 3 marks nothing
        }
        return 0;
      },
      shards);
  ASSERT_EQ(log.size(), 12u) << "three states, each synced once on each of four replicas";
  for (int r = 0; r < 4; ++r) {
    std::vector<uint64_t> order;
    for (const auto& [replica, state] : log) {
      if (replica == r) order.push_back(state);
    }
    const std::vector<uint64_t> want = {first.creation_order(), second.creation_order(), third.creation_order()};
    EXPECT_EQ(order, want) << "replica " << r;
  }
  for (const auto& entry : log) EXPECT_NE(entry.second, unmarked.creation_order());

  // Marks do not outlive their run.
  log.clear();
  s.run([](const Batch&) { return 0; }, shards);
  EXPECT_TRUE(log.empty());
}

// A run that starts while no replica-local state exists (the seed MLP's step) skips the meeting where
// replicas hand in their marks; one that starts with any syncs them as before. A state created inside
// such a run cannot be marked in it: the run ends with a logic_error (no replica waits for ever at a
// meeting the others skipped), and the strategy runs again.
TEST(ReplicaLocalStateTest, ARunStartedWithoutStatesSkipsTheirMeetingAndRefusesOnesCreatedInIt) {
  ASSERT_EQ(ReplicaLocalState::live(), 0) << "a state outlived its test";
  ReplicatedStrategy s(DeviceSpec::custom(4, 0));
  const std::vector<Batch> shards(4);
  const auto syncs = [&](const Batch&) { return s.syncs_local_state() ? 1 : 0; };
  EXPECT_EQ(s.run(syncs, shards), std::vector<int>(4, 0));
  std::vector<std::pair<int, uint64_t>> log;
  std::mutex mu;
  {
    CountingState before(&log, &mu);
    const CountingState copy(before);  // a copy is a state of its own
    EXPECT_EQ(ReplicaLocalState::live(), 2);
    EXPECT_GT(copy.creation_order(), before.creation_order());
    const std::vector<int> marked = s.run(
        [&](const Batch& b) {
          current_replica_context()->mark_for_sync(&before);
          return syncs(b);
        },
        shards);
    EXPECT_EQ(marked, std::vector<int>(4, 1));
    EXPECT_EQ(log.size(), 4u) << "synced on every replica";
  }
  EXPECT_EQ(ReplicaLocalState::live(), 0);
  try {
    s.run(
        [&](const Batch&) {
          CountingState inside(&log, &mu);
          current_replica_context()->mark_for_sync(&inside);
          return 0;
        },
        shards);
    ADD_FAILURE() << "a state created inside a run that does not sync was marked";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("create the layer before running it"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.run(syncs, shards), std::vector<int>(4, 0));
}

// Contributes `sizes.size()` tensors whose values depend on the replica (sums that rounding makes
// order-sensitive), logs when it is asked and when it is given its means, and keeps the means.
class AveragedState : public ReplicaLocalState {
 public:
  AveragedState(std::vector<int64_t> sizes, float scale, std::vector<std::string>* log, std::mutex* mu)
      : sizes_(std::move(sizes)), scale_(scale), log_(log), mu_(mu) {}
  static Tensor contribution(int replica, int64_t size, float scale) {
    Tensor t = Tensor::empty({size});
    for (int64_t i = 0; i < size; ++i) t.data()[i] = scale * (1.0f + 0.1f * static_cast<float>(replica)) / static_cast<float>(3 + i);
    return t;
  }
  std::vector<Tensor> replica_contributions(ReplicaContext& ctx) override {
    note("contributions", ctx);
    std::vector<Tensor> out;
    for (int64_t n : sizes_) out.push_back(contribution(ctx.replica_id(), n, scale_));
    return out;
  }
  void take_means(ReplicaContext& ctx, std::span<Tensor> means) override {
    note("means", ctx);
    if (ctx.replica_id() != 1) return;
    std::lock_guard<std::mutex> lock(*mu_);
    for (const Tensor& m : means) kept.push_back(m.to_vector());
  }
  std::vector<std::vector<float>> kept;  // replica 1's means

 private:
  void note(const char* what, const ReplicaContext& ctx) {
    std::lock_guard<std::mutex> lock(*mu_);
    if (ctx.replica_id() == 0) log_->push_back(what);
  }
  std::vector<int64_t> sizes_;
  float scale_;
  std::vector<std::string>* log_;
  std::mutex* mu_;
};

TEST(ReplicaLocalStateTest, EveryMarkedStateIsAveragedInOneAllReduceWithTheBitsOfItsOwn) {
  ReplicatedStrategy s(DeviceSpec::custom(5, 0));
  std::vector<std::string> log;
  std::mutex mu;
  AveragedState a({3, 17}, 1.0f, &log, &mu), b({1000}, 7.0f, &log, &mu), c({2, 2}, -3.0f, &log, &mu);
  std::vector<Batch> shards(5);
  s.run(
      [&](const Batch&) {
        ReplicaContext* ctx = current_replica_context();
        ctx->mark_for_sync(&c);
        ctx->mark_for_sync(&a);
        if (ctx->replica_id() == 3) ctx->mark_for_sync(&b);
        return 0;
      },
      shards);
  const std::vector<std::string> once = {"contributions", "contributions", "contributions", "means", "means", "means"};
  EXPECT_EQ(log, once) << "every state's contributions, then one all-reduce, then every state's means";
  // Each tensor's mean is what an all-reduce of that tensor alone gives.
  std::vector<std::vector<float>> alone;
  s.run(
      [&](const Batch&) {
        ReplicaContext* ctx = current_replica_context();
        for (const auto& [sizes, scale] : std::vector<std::pair<std::vector<int64_t>, float>>{{{3, 17}, 1.0f}, {{1000}, 7.0f}, {{2, 2}, -3.0f}}) {
          for (int64_t n : sizes) {
            std::vector<Tensor> one = {AveragedState::contribution(ctx->replica_id(), n, scale)};
            ctx->all_reduce(ReduceOp::Mean, one);
            if (ctx->replica_id() == 1) alone.push_back(one[0].to_vector());
          }
        }
        return 0;
      },
      shards);
  std::vector<std::vector<float>> together = a.kept;
  together.insert(together.end(), b.kept.begin(), b.kept.end());
  together.insert(together.end(), c.kept.begin(), c.kept.end());
  ASSERT_EQ(together.size(), alone.size());
  for (size_t i = 0; i < alone.size(); ++i) {
    ASSERT_EQ(together[i].size(), alone[i].size()) << i;
    EXPECT_EQ(0, std::memcmp(together[i].data(), alone[i].data(), alone[i].size() * sizeof(float))) << "tensor " << i;
  }
}

}  // namespace
}  // namespace keel
