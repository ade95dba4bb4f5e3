#include "framework/device/strategy.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <limits>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/core/float_environment.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using ::testing::HasSubstr;
using testing::host;

// Runs `body` with a deadline: a deadlocked strategy fails the test run instead of hanging it.
template <class F>
void within_seconds(int seconds, F&& body) {
  std::packaged_task<void()> task(std::forward<F>(body));
  std::future<void> done = task.get_future();
  std::thread t(std::move(task));
  if (done.wait_for(std::chrono::seconds(seconds)) != std::future_status::ready) {
    std::fprintf(stderr, "FATAL: strategy test did not finish within %d s (deadlock?)\n", seconds);
    std::fflush(stderr);
    std::_Exit(1);
  }
  t.join();
  done.get();  // rethrows a failure of `body`
}

Tensor iota(const Shape& shape, float start = 0) {
  std::vector<float> v(static_cast<size_t>(num_elements(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<float>(i);
  return host(shape, v);
}

TEST(StrategyDistributeTest, SplitsRowsEvenly) {
  ReplicatedStrategy s(DeviceSpec::custom(4, 0));
  const Batch global{iota({8, 3}), iota({8}, 100)};
  std::vector<Batch> shards = s.distribute(global);
  ASSERT_EQ(shards.size(), 4u);
  for (int c = 0; c < 4; ++c) {
    const Batch& b = shards[static_cast<size_t>(c)];
    EXPECT_EQ(b.images.shape(), (Shape{2, 3}));
    EXPECT_EQ(b.labels.shape(), (Shape{2}));
    EXPECT_EQ(b.images.to_vector(), global.images.slice_rows(2 * c, 2 * c + 2).to_vector());
    EXPECT_EQ(b.labels.to_vector(), global.labels.slice_rows(2 * c, 2 * c + 2).to_vector());
  }
}

TEST(StrategyDistributeTest, UnevenRowsGoToTheFirstCores) {
  ReplicatedStrategy s(DeviceSpec::custom(4, 0));
  const Batch global{iota({10, 2}), iota({10})};
  std::vector<Batch> shards = s.distribute(global);
  const std::vector<int64_t> want = {3, 3, 2, 2};
  int64_t row = 0;
  for (int c = 0; c < 4; ++c) {
    const Batch& b = shards[static_cast<size_t>(c)];
    EXPECT_EQ(b.size(), want[static_cast<size_t>(c)]) << "core " << c;
    EXPECT_EQ(b.labels.to_vector(), global.labels.slice_rows(row, row + b.size()).to_vector()) << "core " << c;
    row += b.size();
  }
  EXPECT_EQ(row, 10);
}

TEST(StrategyDistributeTest, ShardsAreChargedAsInputsOnTheirOwnCoreAndCountedAsInfeed) {
  ReplicatedStrategy s(DeviceSpec::custom(4, 0));
  {
    std::vector<Batch> shards = s.distribute(Batch{iota({10, 5}), iota({10})});
    for (int c = 0; c < 4; ++c) {
      const Batch& b = shards[static_cast<size_t>(c)];
      const int64_t bytes = b.images.bytes() + b.labels.bytes();
      const CoreLedger& core = s.ledger().core(c);
      EXPECT_EQ(core.stat(Category::inputs).current, bytes) << c;
      EXPECT_EQ(core.total().current, bytes) << c;
      EXPECT_EQ(core.transfers().host_to_core_bytes, bytes) << c;
      EXPECT_EQ(core.transfers().host_to_core_count, 2) << c;
      ASSERT_EQ(b.images.storage().charges().size(), 1u);
      EXPECT_EQ(b.images.storage().charges()[0].ledger.lock().get(), &s.ledger().core(c));
    }
  }
  for (int c = 0; c < 4; ++c) EXPECT_EQ(s.ledger().core(c).stat(Category::inputs).current, 0) << c;
}

// One core: a batch handed over whole becomes its shard without a copy (its memory, charged as the
// copy would be, freed when the shard is); a batch someone else still holds is copied.
TEST(StrategyDistributeTest, OneCoreTakesAHandedOverBatchInPlace) {
  ReplicatedStrategy s(DeviceSpec::custom(1, 0));
  Batch handed{iota({6, 4}), iota({6}, 100)};
  const float* images = std::as_const(handed.images).data();
  const std::vector<float> values = handed.images.to_vector();
  std::weak_ptr<Storage> batch_memory = handed.images.weak_storage();
  {
    std::vector<Batch> shards = s.distribute(std::move(handed));
    const Batch& b = shards[0];
    EXPECT_EQ(std::as_const(b.images).data(), images);  // no copy
    EXPECT_EQ(b.images.to_vector(), values);
    EXPECT_FALSE(handed.images.defined());
    const CoreLedger& core = s.ledger().core(0);
    EXPECT_EQ(core.stat(Category::inputs).current, b.images.bytes() + b.labels.bytes());
    EXPECT_EQ(core.transfers().host_to_core_count, 2);
    ASSERT_EQ(b.images.storage().charges().size(), 1u);
    EXPECT_EQ(b.images.storage().charges()[0].ledger.lock().get(), &s.ledger().core(0));
    EXPECT_FALSE(batch_memory.expired());  // the shard keeps the batch's memory
  }
  EXPECT_TRUE(batch_memory.expired());
  EXPECT_EQ(s.ledger().core(0).stat(Category::inputs).current, 0);

  Batch kept{iota({6, 4}), iota({6}, 100)};
  const Tensor other_handle = kept.images;  // still read by someone else: copied
  const Tensor view = kept.labels.slice_rows(0, 3);  // a view of the labels: copied too
  std::vector<Batch> shards = s.distribute(Batch(kept));
  EXPECT_NE(std::as_const(shards[0].images).data(), std::as_const(other_handle).data());
  EXPECT_NE(std::as_const(shards[0].labels).data(), std::as_const(kept.labels).data());
  EXPECT_EQ(shards[0].images.to_vector(), other_handle.to_vector());
  EXPECT_EQ(shards[0].labels.to_vector(), kept.labels.to_vector());
}

// Several cores: each takes its rows of a batch handed over in the batch's memory, charged to it as
// a copy would be; the memory lives until the last shard goes. A batch still held is copied.
TEST(StrategyDistributeTest, SeveralCoresTakeTheirRowsOfAHandedOverBatchInPlace) {
  ReplicatedStrategy s(DeviceSpec::custom(3, 0));
  Batch handed{iota({5, 2}), iota({5}, 100)};
  const Tensor global = handed.images.clone(), labels = handed.labels.clone();
  const float* images = std::as_const(handed.images).data();
  std::weak_ptr<Storage> batch_memory = handed.images.weak_storage();
  {
    std::vector<Batch> shards = s.distribute(std::move(handed));
    EXPECT_FALSE(handed.images.defined());
    const int64_t begin[] = {0, 2, 4}, end[] = {2, 4, 5};
    for (int c = 0; c < 3; ++c) {
      const Batch& b = shards[static_cast<size_t>(c)];
      EXPECT_EQ(std::as_const(b.images).data(), images + 2 * begin[c]) << c;  // no copy
      EXPECT_EQ(b.images.to_vector(), global.slice_rows(begin[c], end[c]).to_vector()) << c;
      EXPECT_EQ(b.labels.to_vector(), labels.slice_rows(begin[c], end[c]).to_vector()) << c;
      const CoreLedger& core = s.ledger().core(c);
      EXPECT_EQ(core.stat(Category::inputs).current, (end[c] - begin[c]) * (2 + 1) * 4) << c;
      EXPECT_EQ(core.transfers().host_to_core_count, 2) << c;
      ASSERT_EQ(b.images.storage().charges().size(), 1u);
      EXPECT_EQ(b.images.storage().charges()[0].ledger.lock().get(), &s.ledger().core(c));
    }
    shards[0] = Batch{};
    shards[2] = Batch{};
    EXPECT_FALSE(batch_memory.expired());  // core 1's shard still reads it
    EXPECT_EQ(shards[1].images.to_vector(), global.slice_rows(2, 4).to_vector());
  }
  EXPECT_TRUE(batch_memory.expired());
  for (int c = 0; c < 3; ++c) EXPECT_EQ(s.ledger().core(c).stat(Category::inputs).current, 0) << c;

  Batch kept{iota({4, 2}), iota({4}, 100)};
  const Tensor other_handle = kept.images;  // still read by someone else: copied
  std::vector<Batch> shards = s.distribute(Batch(kept));
  EXPECT_NE(std::as_const(shards[0].images).data(), std::as_const(other_handle).data());
  EXPECT_NE(std::as_const(shards[0].labels).data(), std::as_const(kept.labels).data());
  EXPECT_EQ(shards[1].images.to_vector(), other_handle.slice_rows(2, 3).to_vector());
}

TEST(StrategyDistributeTest, ImagesWithoutLabels) {
  ReplicatedStrategy s(DeviceSpec::custom(2, 0));
  std::vector<Batch> shards = s.distribute(Batch{iota({3, 2}), Tensor()});
  EXPECT_EQ(shards[0].size(), 2);
  EXPECT_EQ(shards[1].size(), 1);
  EXPECT_FALSE(shards[0].labels.defined());
  EXPECT_EQ(s.ledger().core(0).transfers().host_to_core_count, 1);
}

// Each replica runs on one of the 2 slots' threads (slot 0: the caller's), with its own replica
// and device context, and the caller's context is its own again afterwards.
TEST(StrategyRunTest, RunsEachReplicaOnASlotsThreadWithItsOwnContextAndCore) {
  ReplicatedStrategy s(DeviceSpec::custom(4, 0), ReplicatedStrategy::Options{.host_threads = 2});
  std::vector<Batch> shards = s.distribute(Batch{iota({4, 1}), Tensor()});
  struct Seen {
    std::thread::id thread;
    int replica;
    int num_replicas;
    int context_core;
    Tensor t;
  };
  std::vector<Seen> seen;
  int core_after = 0;
  const ReplicaContext* replica_after = nullptr;
  within_seconds(60, [&] {
    seen = s.run(
        [&](const Batch& b) {
          const ReplicaContext* rc = current_replica_context();
          Seen out{std::this_thread::get_id(), rc ? rc->replica_id() : -1, rc ? rc->num_replicas() : -1,
                   device_context().core, Tensor()};
          // (replica + 1) rows: each core's charge is recognisable.
          out.t = Tensor::zeros({out.replica + 1, 10});
          return out;
        },
        shards);
    core_after = device_context().core;
    replica_after = current_replica_context();
  });
  ASSERT_EQ(seen.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    const Seen& x = seen[static_cast<size_t>(r)];
    EXPECT_EQ(x.replica, r);
    EXPECT_EQ(x.num_replicas, 4);
    EXPECT_EQ(x.context_core, r);
    ASSERT_EQ(x.t.storage().charges().size(), 1u);
    EXPECT_EQ(x.t.storage().charges()[0].ledger.lock().get(), &s.ledger().core(r));
    EXPECT_EQ(s.ledger().core(r).stat(Category::activations).current, (r + 1) * 10 * 4) << r;
  }
  std::set<std::thread::id> threads;  // the slots take the replicas as they come free: 2 at most
  for (const Seen& x : seen) threads.insert(x.thread);
  EXPECT_LE(threads.size(), 2u);
  EXPECT_EQ(replica_after, nullptr) << "no replica context outside run";
  EXPECT_EQ(core_after, -1) << "the caller's device context is its own again";
}

TEST(StrategyRunTest, RunDistributedFeedsEachReplicaItsShardOnItsCore) {
  ReplicatedStrategy s(DeviceSpec::custom(4, 0));
  const Batch global{iota({10, 2}), iota({10})};
  struct Seen {
    std::vector<float> labels;
    const CoreLedger* charged_on;
    int64_t inputs_current;
  };
  std::vector<Seen> seen;
  within_seconds(60, [&] {
    seen = s.run_distributed(
        [&](const Batch& b) {
          const int r = current_replica_context()->replica_id();
          return Seen{b.labels.to_vector(), b.images.storage().charges().at(0).ledger.lock().get(),
                      s.ledger().core(r).stat(Category::inputs).current};
        },
        global);
  });
  int64_t row = 0;
  for (int r = 0; r < 4; ++r) {
    const Seen& x = seen[static_cast<size_t>(r)];
    const int64_t rows = r < 2 ? 3 : 2;
    EXPECT_EQ(x.labels, global.labels.slice_rows(row, row + rows).to_vector()) << r;
    EXPECT_EQ(x.charged_on, &s.ledger().core(r)) << r;
    EXPECT_EQ(x.inputs_current, rows * 3 * 4) << r;  // images (rows, 2) + labels (rows,)
    EXPECT_EQ(s.ledger().core(r).transfers().host_to_core_bytes, rows * 3 * 4) << r;
    EXPECT_EQ(s.ledger().core(r).stat(Category::inputs).current, 0) << "the shard is released after the step";
    row += rows;
  }
}

TEST(StrategyRunTest, AllReduceMeanGivesEveryReplicaTheMean) {
  ReplicatedStrategy s(DeviceSpec::custom(4, 0));
  std::vector<Batch> shards = s.distribute(Batch{iota({4, 1}), Tensor()});
  std::vector<std::vector<std::vector<float>>> out;
  within_seconds(60, [&] {
    out = s.run(
        [&](const Batch&) {
          const int r = current_replica_context()->replica_id();
          std::vector<Tensor> grads = {Tensor::full({3}, static_cast<float>(r + 1)), Tensor(),
                                       Tensor::full({2, 2}, 10.0f * static_cast<float>(r + 1))};
          current_replica_context()->all_reduce(ReduceOp::Mean, grads);
          std::vector<std::vector<float>> v;
          for (const Tensor& g : grads) v.push_back(g.defined() ? g.to_vector() : std::vector<float>{});
          return v;
        },
        shards);
  });
  // (1 + 2 + 3 + 4) / 4 = 2.5 on every replica; undefined tensors stay undefined.
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(out[static_cast<size_t>(r)][0], (std::vector<float>{2.5f, 2.5f, 2.5f})) << r;
    EXPECT_TRUE(out[static_cast<size_t>(r)][1].empty()) << r;
    EXPECT_EQ(out[static_cast<size_t>(r)][2], (std::vector<float>(4, 25.0f))) << r;
  }
}

TEST(StrategyRunTest, CollectivesInForEachReplicaThrowLogicError) {
  // for_each_replica's bodies may not wait for each other: a collective there is a bug in keel.
  ReplicatedStrategy s(DeviceSpec::custom(2, 0));
  EXPECT_EQ(current_replica_context(), nullptr);
  EXPECT_THROW(s.for_each_replica([&](int) {
    std::vector<Tensor> grads = {Tensor::full({1}, 1.0f)};
    current_replica_context()->all_reduce(ReduceOp::Mean, grads);
  }),
               std::logic_error);
}

TEST(StrategyRunTest, MergeCallRunsOnceInTheMirroredContext) {
  ReplicatedStrategy s(DeviceSpec::custom(4, 0));
  std::vector<Batch> shards = s.distribute(Batch{iota({4, 1}), Tensor()});
  std::atomic<int> calls{0};
  std::atomic<int> core_seen{99};
  Tensor made;
  within_seconds(60, [&] {
    s.run(
        [&](const Batch&) {
          current_replica_context()->merge_call([&] {
            ++calls;
            core_seen = device_context().core;
            made = Tensor::zeros({5});
          });
          return 0;
        },
        shards);
  });
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(core_seen.load(), -1);
  for (int c = 0; c < 4; ++c) EXPECT_EQ(s.ledger().core(c).stat(Category::parameters).current, 20) << c;
}

TEST(StrategyRunTest, ErrorInOneReplicaIsRethrownWhileOthersWaitInAllReduce) {
  ReplicatedStrategy s(DeviceSpec::custom(4, 0));
  std::vector<Batch> shards = s.distribute(Batch{iota({4, 1}), Tensor()});
  within_seconds(60, [&] {
    try {
      s.run(
          [&](const Batch&) {
            const int r = current_replica_context()->replica_id();
            std::vector<Tensor> grads = {Tensor::full({2}, 1.0f)};
            if (r == 3) {
              // Let the others reach the barrier first.
              std::this_thread::sleep_for(std::chrono::milliseconds(200));
              throw std::runtime_error("boom in replica 3");
            }
            current_replica_context()->all_reduce(ReduceOp::Mean, grads);
            return 0;
          },
          shards);
      ADD_FAILURE() << "run() returned although replica 3 threw";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "boom in replica 3") << "the real error, not the cancellation it caused";
    }
  });
  // Reusable after the failure.
  std::vector<float> mean;
  within_seconds(60, [&] {
    auto out = s.run(
        [&](const Batch&) {
          const int r = current_replica_context()->replica_id();
          std::vector<Tensor> grads = {Tensor::full({1}, static_cast<float>(r))};
          current_replica_context()->all_reduce(ReduceOp::Mean, grads);
          grads[0].fill(static_cast<float>(2 * r));
          current_replica_context()->all_reduce(ReduceOp::Mean, grads);  // the barrier is reusable within a run too
          return grads[0].to_vector();
        },
        shards);
    mean = out[0];
  });
  // First reduce: 1.5 = mean(0, 1, 2, 3); the second: mean(0, 2, 4, 6) = 3.
  EXPECT_EQ(mean, (std::vector<float>{3.0f}));
}

TEST(StrategyRunTest, ResourceExhaustedOnOneCoreIsRethrownAndTheStrategyRecovers) {
  constexpr int64_t kBudget = int64_t{1} << 20;
  ReplicatedStrategy s(DeviceSpec::custom(4, kBudget));
  std::vector<Batch> shards = s.distribute(Batch{iota({4, 1}), Tensor()});
  // Core 2 is nearly full: its replica's 4000-byte allocation cannot fit.
  const uint64_t hog = s.ledger().core(2).charge(kBudget - 1000, Category::workspace, "hog", {});
  within_seconds(60, [&] {
    try {
      s.run(
          [&](const Batch&) {
            std::vector<Tensor> grads = {Tensor::zeros({1000})};
            current_replica_context()->all_reduce(ReduceOp::Mean, grads);
            return 0;
          },
          shards);
      ADD_FAILURE() << "run() returned although core 2 is out of memory";
    } catch (const ResourceExhausted& e) {
      EXPECT_EQ(e.core(), 2);
      EXPECT_EQ(e.requested_bytes(), 4000);
      EXPECT_THAT(std::string(e.what()), HasSubstr("hog"));
    }
  });
  for (int c = 0; c < 4; ++c) EXPECT_EQ(s.ledger().core(c).stat(Category::activations).current, 0) << c;
  s.ledger().core(2).release(hog);
  std::vector<float> mean;
  within_seconds(60, [&] {
    mean = s.run(
        [&](const Batch&) {
          std::vector<Tensor> grads = {Tensor::full({1000}, static_cast<float>(current_replica_context()->replica_id()))};
          current_replica_context()->all_reduce(ReduceOp::Mean, grads);
          return grads[0].to_vector();
        },
        shards)[0];
  });
  EXPECT_EQ(mean, std::vector<float>(1000, 1.5f));
}

TEST(StrategyRunTest, ErrorBeforeAnyBarrierDoesNotDeadlockLaterArrivals) {
  ReplicatedStrategy s(DeviceSpec::custom(4, 0));
  std::vector<Batch> shards = s.distribute(Batch{iota({4, 1}), Tensor()});
  within_seconds(60, [&] {
    EXPECT_THROW(s.run(
                     [&](const Batch&) {
                       const int r = current_replica_context()->replica_id();
                       if (r == 0) throw std::invalid_argument("replica 0 fails first");
                       // The others arrive late, after the failure.
                       std::this_thread::sleep_for(std::chrono::milliseconds(100));
                       std::vector<Tensor> grads = {Tensor::zeros({1})};
                       current_replica_context()->all_reduce(ReduceOp::Mean, grads);
                       current_replica_context()->merge_call([] {});
                       return 0;
                     },
                     shards),
                 std::invalid_argument);
  });
}

TEST(StrategyRunTest, EightReplicasOnTwoHostThreadsComplete) {
  ReplicatedStrategy s(DeviceSpec::custom(8, 0), ReplicatedStrategy::Options{.abstract = false, .host_threads = 2});
  std::vector<Batch> shards = s.distribute(Batch{iota({16, 2}), iota({16})});
  std::atomic<int> merges{0};
  std::vector<std::vector<float>> out;
  within_seconds(120, [&] {
    for (int step = 0; step < 3; ++step) {
      out = s.run(
          [&](const Batch& b) {
            const int r = current_replica_context()->replica_id();
            std::vector<Tensor> grads = {Tensor::full({4}, static_cast<float>(r)), Tensor::full({2}, 1.0f)};
            current_replica_context()->all_reduce(ReduceOp::Mean, grads);
            current_replica_context()->merge_call([&] { ++merges; });
            EXPECT_EQ(b.size(), 2);
            return grads[0].to_vector();
          },
          shards);
    }
  });
  EXPECT_EQ(merges.load(), 3);
  EXPECT_EQ(out[0], std::vector<float>(4, 3.5f));  // mean(0..7)
}

// A step's arithmetic flushes subnormals, as TensorFlow's kernels do (framework/core/
// float_environment.h): on every replica's fiber, on either host thread, in for_each_replica and in
// reduce(); the caller's own mode is left as it was.
TEST(StrategyRunTest, ReplicasComputeWithSubnormalsFlushedAndTheCallerKeepsItsMode) {
  if (!FlushSubnormals::available()) GTEST_SKIP() << "this CPU has no flush-to-zero mode";
  ASSERT_FALSE(FlushSubnormals::active());
  const float min = std::numeric_limits<float>::min();
  ReplicatedStrategy s(DeviceSpec::custom(4, 0), ReplicatedStrategy::Options{.abstract = false, .host_threads = 2});
  std::vector<Batch> shards = s.distribute(Batch{iota({8, 2}), iota({8})});
  std::vector<std::vector<float>> halves;
  within_seconds(120, [&] {
    halves = s.run(
        [&](const Batch&) {
          EXPECT_TRUE(FlushSubnormals::active());
          std::vector<Tensor> v = {Tensor::full({2}, min)};
          current_replica_context()->all_reduce(ReduceOp::Sum, v);  // 4 min: normal
          volatile float eighth = 0.125f;  // not folded at compile time
          std::vector<float> out = v[0].to_vector();
          for (float& x : out) x *= eighth;  // min / 2: subnormal, flushed
          return out;
        },
        shards);
    std::atomic<int> flushed{0};
    s.for_each_replica([&](int) { flushed += FlushSubnormals::active() ? 1 : 0; });
    EXPECT_EQ(flushed.load(), 4);
  });
  for (const std::vector<float>& h : halves) EXPECT_EQ(h, std::vector<float>(2, 0.0f));
  EXPECT_FALSE(FlushSubnormals::active());
  const std::vector<Tensor> tiny = {Tensor::full({1}, min / 4), Tensor::full({1}, min / 4)};
  EXPECT_EQ(s.reduce(ReduceOp::Sum, tiny).to_vector()[0], 0.0f) << "subnormal operands count as zero";
  EXPECT_FALSE(FlushSubnormals::active());
}

// In one process, signalled_anywhere() is the watched signal as the last gather_per_replica read it
// (tests/device/process_collectives_test.cc has the processes' case).
TEST(StrategyRunTest, AWatchedSignalIsReadAtEachGather) {
  ReplicatedStrategy s(DeviceSpec::custom(2, 0));
  std::vector<int> totals = {1, 2};
  s.gather_per_replica(totals);
  EXPECT_FALSE(s.signalled_anywhere()) << "nothing watched";
  std::atomic<int> signal{0};
  s.watch_signal(&signal);
  signal = 2;
  EXPECT_FALSE(s.signalled_anywhere()) << "not before the next gather";
  s.gather_per_replica(totals);
  EXPECT_TRUE(s.signalled_anywhere());
  EXPECT_EQ(totals, (std::vector<int>{1, 2}));
  s.watch_signal(nullptr);
  s.gather_per_replica(totals);
  EXPECT_FALSE(s.signalled_anywhere());
}

TEST(StrategyReduceTest, SumAndMean) {
  ReplicatedStrategy s(DeviceSpec::custom(3, 0));
  const std::vector<Tensor> per_replica = {host({2}, {1, 2}), host({2}, {3, 4}), host({2}, {5, 9})};
  EXPECT_EQ(s.reduce(ReduceOp::Sum, per_replica).to_vector(), (std::vector<float>{9, 15}));
  EXPECT_EQ(s.reduce(ReduceOp::Mean, per_replica).to_vector(), (std::vector<float>{3, 5}));
  // Each reduce reads one value back from every core (outfeed).
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(s.ledger().core(c).transfers().core_to_host_count, 2) << c;
    EXPECT_EQ(s.ledger().core(c).transfers().core_to_host_bytes, 16) << c;
  }
  Tensor r = s.reduce(ReduceOp::Sum, per_replica);
  EXPECT_TRUE(r.storage().charges().empty()) << "the result lives on the host";
}

TEST(StrategyReduceTest, BadInputsThrowInvalidArgument) {
  ReplicatedStrategy s(DeviceSpec::custom(2, 0));
  EXPECT_THROW(s.reduce(ReduceOp::Sum, {}), std::invalid_argument);
  EXPECT_THROW(s.reduce(ReduceOp::Sum, {host({2}, {1, 2}), host({3}, {1, 2, 3})}), std::invalid_argument);
}

TEST(StrategyScopeTest, ScopeMirrorsNewTensorsAsParameters) {
  ReplicatedStrategy s(DeviceSpec::preset("v3-8"));
  {
    auto scope = s.scope();
    EXPECT_EQ(device_context().strategy, &s);
    Tensor w = Tensor::zeros({10, 10});
    for (int c = 0; c < 8; ++c) EXPECT_EQ(s.ledger().core(c).stat(Category::parameters).current, 400) << c;
  }
  EXPECT_EQ(device_context().ledger, nullptr) << "the previous context is restored";
  for (int c = 0; c < 8; ++c) EXPECT_EQ(s.ledger().core(c).stat(Category::parameters).current, 0) << c;
}

}  // namespace
}  // namespace keel
