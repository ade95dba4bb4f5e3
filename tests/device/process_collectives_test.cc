// Every collective across processes (issue 12): run by ctest under `mpirun -np 2` and `-np 4`
// (tests/CMakeLists.txt), and alone as the one-process reference. Each process runs its share of an
// 8-core slice of 4 hosts; every replica's inputs are a function of its global id, so each process
// can compute what one process running all 8 replicas gives, and the results must be those bits.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "framework/device/collectives.h"
#include "framework/device/process_group.h"
#include "framework/device/strategy.h"

namespace keel {
namespace {

constexpr int kReplicas = 8;

// Replica r's i-th input: values whose sums round differently in different orders.
float input(int replica, int64_t i, int salt) {
  return std::sin(0.7f * static_cast<float>(i + 1) + 1.3f * static_cast<float>(replica) + static_cast<float>(salt)) *
         std::pow(10.0f, static_cast<float>((replica * 3 + i) % 7) - 3.0f);
}

Tensor inputs(int replica, int64_t n, int salt) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = input(replica, i, salt);
  return Tensor::from_vector({n}, v);
}

// The one-process result: the tree-ordered sum (or mean) of every replica's inputs.
std::vector<float> reference_sum(int64_t n, int salt, bool mean) {
  std::vector<std::vector<float>> all;
  for (int r = 0; r < kReplicas; ++r) all.push_back(inputs(r, n, salt).to_vector());
  std::vector<const float*> in;
  for (const auto& a : all) in.push_back(a.data());
  std::vector<float> out(static_cast<size_t>(n));
  tree_sum(in, out.data(), n);
  if (mean) {
    for (float& x : out) x /= static_cast<float>(kReplicas);
  }
  return out;
}

class ProcessCollectives : public ::testing::Test {
 protected:
  ProcessCollectives() : strategy_(DeviceSpec::custom(kReplicas, 0, /*hosts=*/4), options()) {}
  static ReplicatedStrategy::Options options() {
    ReplicatedStrategy::Options o;
    o.processes = &ProcessGroup::world();
    return o;
  }
  ReplicatedStrategy strategy_;
};

TEST_F(ProcessCollectives, RunsItsShareOfTheSlice) {
  const ProcessGroup& world = ProcessGroup::world();
  EXPECT_EQ(strategy_.local_replicas(), kReplicas / world.size());
  EXPECT_EQ(strategy_.first_local_replica(), world.rank() * kReplicas / world.size());
}

TEST_F(ProcessCollectives, AllReduceSumAndMeanAreOneProcessesBits) {
  for (const bool mean : {false, true}) {
    // Two tensors in one call (packed into one exchange), one of them ragged.
    const std::vector<float> a = reference_sum(1001, 1, mean), b = reference_sum(7, 2, mean);
    strategy_.run_replicas([&](ReplicaContext& ctx) {
      std::vector<Tensor> values = {inputs(ctx.replica_id(), 1001, 1), Tensor(), inputs(ctx.replica_id(), 7, 2)};
      ctx.all_reduce(mean ? ReduceOp::Mean : ReduceOp::Sum, values);
      EXPECT_EQ(values[0].to_vector(), a) << "replica " << ctx.replica_id();
      EXPECT_EQ(values[2].to_vector(), b) << "replica " << ctx.replica_id();
    });
  }
}

// Consecutive all-reduces of growing and shrinking sizes: on one machine they go through the
// processes' shared memory, whose window grows and whose halves alternate between calls; a replica
// reads each result while another may already start the next call.
TEST_F(ProcessCollectives, ConsecutiveAllReducesOfChangingSizesKeepTheirBits) {
  const std::vector<int64_t> sizes = {10, 5000, 3, 5000, 20000, 1};
  std::vector<std::vector<float>> expected;
  for (size_t k = 0; k < sizes.size(); ++k) expected.push_back(reference_sum(sizes[k], 10 + static_cast<int>(k), k % 2 == 1));
  strategy_.run_replicas([&](ReplicaContext& ctx) {
    for (size_t k = 0; k < sizes.size(); ++k) {
      std::vector<Tensor> values = {inputs(ctx.replica_id(), sizes[k], 10 + static_cast<int>(k))};
      ctx.all_reduce(k % 2 == 1 ? ReduceOp::Mean : ReduceOp::Sum, values);
      EXPECT_EQ(values[0].to_vector(), expected[k]) << "call " << k << ", replica " << ctx.replica_id();
    }
  });
}

// The optimizer's reduction, consecutive calls of changing sizes with a NaN or an infinity planted
// in one: each replica's shard of each mean (of its process's variables: shard_range over the local
// replicas; or of the slice's) holds one process's bits wherever results[i] says it is (in place in
// the processes' shared memory, on one machine), and every replica of every process gets the vote
// one process gives: the first tensor whose mean is not finite.
TEST_F(ProcessCollectives, AllReduceForUpdateGivesEveryShardOneProcessesBitsAndOneVote) {
  const std::vector<std::vector<int64_t>> calls = {{1001, 7, 64}, {5, 20000, 3}, {1001, 7, 64}};
  const int local = strategy_.local_replicas();
  for (const bool slice_shards : {false, true}) {
    strategy_.run_replicas([&](ReplicaContext& ctx) {
      for (size_t k = 0; k < calls.size(); ++k) {
        const std::vector<int64_t>& sizes = calls[k];
        std::vector<Tensor> values;
        for (size_t i = 0; i < sizes.size(); ++i) values.push_back(inputs(ctx.replica_id(), sizes[i], 30 + static_cast<int>(i)));
        const bool plant = k == 1 && ctx.replica_id() == kReplicas - 1;  // the last process's last replica
        if (plant) values[1].data()[12345] = std::numeric_limits<float>::quiet_NaN();
        std::vector<const float*> results(values.size());
        const size_t vote = ctx.all_reduce_for_update(ReduceOp::Mean, values, slice_shards, results);
        EXPECT_EQ(vote, k == 1 ? 1u : sizes.size()) << "call " << k << ", replica " << ctx.replica_id();
        for (size_t i = 0; i < sizes.size(); ++i) {
          if (k == 1 && i == 1) continue;  // the planted NaN's mean
          const std::vector<float> want = reference_sum(sizes[i], 30 + static_cast<int>(i), /*mean=*/true);
          const ShardRange own = slice_shards ? shard_range(sizes[i], kReplicas, ctx.replica_id())
                                              : shard_range(sizes[i], local, ctx.replica_id() - strategy_.first_local_replica());
          const std::vector<float> got(results[i] + own.begin, results[i] + own.end);
          EXPECT_EQ(got, std::vector<float>(want.begin() + own.begin, want.begin() + own.end))
              << "call " << k << ", tensor " << i << ", replica " << ctx.replica_id();
        }
        ctx.barrier();  // the results stay valid until a replica of this process calls a collective
      }
    });
  }
}

TEST_F(ProcessCollectives, ReduceScatterGivesEachReplicaItsShard) {
  const int64_t n = 1003;
  const std::vector<float> sum = reference_sum(n, 3, /*mean=*/true);
  strategy_.run_replicas([&](ReplicaContext& ctx) {
    const Tensor shard = ctx.reduce_scatter(ReduceOp::Mean, inputs(ctx.replica_id(), n, 3));
    const ShardRange range = shard_range(n, kReplicas, ctx.replica_id());
    EXPECT_EQ(shard.to_vector(), std::vector<float>(sum.begin() + range.begin, sum.begin() + range.end));
  });
}

TEST_F(ProcessCollectives, AllGatherConcatenatesEveryReplicasRowsInOrder) {
  strategy_.run_replicas([&](ReplicaContext& ctx) {
    const int r = ctx.replica_id();
    const Tensor mine = Tensor::full({r % 3, 2}, static_cast<float>(r));  // 0, 1 or 2 rows
    const Tensor all = ctx.all_gather(mine);
    std::vector<float> expected;
    for (int q = 0; q < kReplicas; ++q) expected.insert(expected.end(), static_cast<size_t>(2 * (q % 3)), static_cast<float>(q));
    EXPECT_EQ(all.to_vector(), expected);
  });
}

// Each process has written its replicas' shards (its process range) of its own copy, the rest
// garbage: afterwards every replica of every process holds every process's range, and a tensor
// left undefined stays so.
TEST_F(ProcessCollectives, ShareProcessShardsGivesEveryCopyEveryProcesssRange) {
  const std::vector<int64_t> sizes = {37, 5, 4099};
  strategy_.run_replicas([&](ReplicaContext& ctx) {
    const int first = strategy_.first_local_replica(), local = strategy_.local_replicas();
    std::vector<Tensor> values;
    for (int64_t n : sizes) {
      values.push_back(Tensor::full({n}, -1.0f));  // each replica its own buffer here
      const ShardRange here = {shard_range(n, kReplicas, first).begin, shard_range(n, kReplicas, first + local - 1).end};
      for (int64_t i = here.begin; i < here.end; ++i) values.back().data()[i] = static_cast<float>(i * 3 + n);
    }
    values.insert(values.begin() + 1, Tensor());
    ctx.share_process_shards(values);
    EXPECT_FALSE(values[1].defined());
    for (size_t t = 0; t < values.size(); ++t) {
      if (!values[t].defined()) continue;
      const int64_t n = values[t].size();
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(values[t].data()[i], static_cast<float>(i * 3 + n)) << "tensor " << t << ", element " << i;
      }
    }
  });
}

// Parameters as the optimizer shares them: one buffer for the process's replicas (mirrored), each
// replica writing its shard of the slice, step after step. From the second call on, where the
// processes share memory, the buffer is the machine's one copy (nothing is copied between
// processes any more); the values are the same either way.
TEST_F(ProcessCollectives, SharedParametersGiveEveryProcessEveryShardStepAfterStep) {
  const std::vector<int64_t> sizes = {37, 4099, 1};
  const int core = strategy_.first_local_replica();
  const int64_t charged = strategy_.ledger().core(core).stat(Category::parameters).current;
  std::vector<Tensor> values;
  {
    auto scope = strategy_.scope();
    for (int64_t n : sizes) values.push_back(Tensor::full({n}, -1.0f));
  }
  ProcessGroup& world = ProcessGroup::world();
  for (int step = 0; step < 4; ++step) {
    strategy_.run_replicas([&](ReplicaContext& ctx) {
      std::vector<Tensor> gradient = {Tensor::full({64}, 1.0f)};  // as a step: an all-reduce first
      ctx.all_reduce(ReduceOp::Mean, gradient);
      std::vector<Tensor> mine = values;
      for (Tensor& t : mine) {
        const ShardRange own = shard_range(t.size(), kReplicas, ctx.replica_id());
        for (int64_t i = own.begin; i < own.end; ++i) t.data()[i] = static_cast<float>(i * 3 + step);
      }
      ctx.share_process_shards(mine);
      for (const Tensor& t : mine) {
        for (int64_t i = 0; i < t.size(); ++i) {
          ASSERT_EQ(t.data()[i], static_cast<float>(i * 3 + step)) << "step " << step << ", element " << i;
        }
      }
      ctx.barrier();  // every replica has read the step's values before any writes the next's
    });
    const bool shared = world.size() > 1 && world.shares_memory();
    for (const Tensor& t : values) EXPECT_EQ(world.in_shared_memory(t), shared) << "after step " << step;
  }
  // Gone while in shared memory: their charges go with them, as anywhere else.
  values.clear();
  EXPECT_EQ(strategy_.ledger().core(core).stat(Category::parameters).current, charged);
}

TEST_F(ProcessCollectives, AllGatherShardsFillsEveryShardEverywhere) {
  const int64_t n = 37;
  strategy_.run_replicas([&](ReplicaContext& ctx) {
    std::vector<Tensor> values = {Tensor::zeros({n})};  // each replica its own buffer here
    const ShardRange mine = shard_range(n, kReplicas, ctx.replica_id());
    for (int64_t i = mine.begin; i < mine.end; ++i) values[0].data()[i] = static_cast<float>(i * 10 + ctx.replica_id());
    ctx.all_gather_shards(values);
    for (int q = 0; q < kReplicas; ++q) {
      const ShardRange theirs = shard_range(n, kReplicas, q);
      for (int64_t i = theirs.begin; i < theirs.end; ++i) EXPECT_EQ(values[0].data()[i], static_cast<float>(i * 10 + q));
    }
  });
}

// Gathers of several tensors (one undefined) between all-reduces, each larger than the last: on one
// machine they share the processes' memory, packed, with halves alternating and the window growing.
TEST_F(ProcessCollectives, GathersAndAllReducesInterleavedKeepTheirBits) {
  const std::vector<float> small = reference_sum(10, 20, false), large = reference_sum(30000, 21, true);
  strategy_.run_replicas([&](ReplicaContext& ctx) {
    for (int round = 0; round < 2; ++round) {
      std::vector<Tensor> reduced = {inputs(ctx.replica_id(), round == 0 ? 10 : 30000, round == 0 ? 20 : 21)};
      ctx.all_reduce(round == 0 ? ReduceOp::Sum : ReduceOp::Mean, reduced);
      EXPECT_EQ(reduced[0].to_vector(), round == 0 ? small : large) << "round " << round << ", replica " << ctx.replica_id();
      const std::vector<int64_t> sizes = {1001 * (round + 1), 0, 7, 40000 * round + 3};
      std::vector<Tensor> values;
      for (int64_t n : sizes) values.push_back(n == 0 ? Tensor() : Tensor::zeros({n}));
      for (size_t k = 0; k < values.size(); ++k) {
        if (!values[k].defined()) continue;
        const ShardRange mine = shard_range(sizes[k], kReplicas, ctx.replica_id());
        for (int64_t i = mine.begin; i < mine.end; ++i) values[k].data()[i] = static_cast<float>(i * 10 + ctx.replica_id() + 1000 * k);
      }
      ctx.all_gather_shards(values);
      int64_t wrong = 0;  // counted, not asserted: a replica that left early would leave the others waiting
      for (size_t k = 0; k < values.size(); ++k) {
        if (!values[k].defined()) continue;
        for (int q = 0; q < kReplicas; ++q) {
          const ShardRange theirs = shard_range(sizes[k], kReplicas, q);
          for (int64_t i = theirs.begin; i < theirs.end; ++i) wrong += values[k].data()[i] != static_cast<float>(i * 10 + q + 1000 * k);
        }
      }
      EXPECT_EQ(wrong, 0) << "round " << round << ", replica " << ctx.replica_id();
    }
  });
}

TEST_F(ProcessCollectives, BroadcastFromAReplicaOfAnotherProcess) {
  for (const int root : {0, 5, 7}) {
    strategy_.run_replicas([&](ReplicaContext& ctx) {
      Tensor value = inputs(ctx.replica_id(), 5, 4);
      ctx.broadcast(value, root);
      EXPECT_EQ(value.to_vector(), inputs(root, 5, 4).to_vector()) << "root " << root;
    });
  }
}

TEST_F(ProcessCollectives, MinAndBarrierSeeEveryReplica) {
  strategy_.run_replicas([&](ReplicaContext& ctx) {
    ctx.barrier();
    EXPECT_EQ(ctx.all_reduce_min(100 - ctx.replica_id()), 100 - (kReplicas - 1));
  });
}

TEST_F(ProcessCollectives, PerReplicaTotalsReachEveryProcess) {
  std::vector<int64_t> per_replica(kReplicas, -1);
  for (int r = strategy_.first_local_replica(); r < strategy_.first_local_replica() + strategy_.local_replicas(); ++r) {
    per_replica[static_cast<size_t>(r)] = 1000 + r;
  }
  strategy_.gather_per_replica(per_replica);
  for (int r = 0; r < kReplicas; ++r) EXPECT_EQ(per_replica[static_cast<size_t>(r)], 1000 + r);
}

// A signal seen by one process reaches every process with the totals' exchange, and none is
// reported where no process saw one (ReplicatedStrategy::watch_signal); the totals still arrive.
TEST_F(ProcessCollectives, AWatchedSignalTravelsWithTheTotalsToEveryProcess) {
  const ProcessGroup& world = ProcessGroup::world();
  std::atomic<int> signal{0};
  strategy_.watch_signal(&signal);
  std::vector<int64_t> per_replica(kReplicas, -1);
  for (int r = strategy_.first_local_replica(); r < strategy_.first_local_replica() + strategy_.local_replicas(); ++r) {
    per_replica[static_cast<size_t>(r)] = 7 * r;
  }
  strategy_.gather_per_replica(per_replica);
  EXPECT_FALSE(strategy_.signalled_anywhere());
  if (world.rank() == world.size() - 1) signal = 15;  // the last process only
  strategy_.gather_per_replica(per_replica);
  EXPECT_TRUE(strategy_.signalled_anywhere()) << "rank " << world.rank();
  for (int r = 0; r < kReplicas; ++r) EXPECT_EQ(per_replica[static_cast<size_t>(r)], 7 * r);
  strategy_.watch_signal(nullptr);
  strategy_.gather_per_replica(per_replica);
  EXPECT_FALSE(strategy_.signalled_anywhere());
}

}  // namespace
}  // namespace keel

// MPI is finalised once every test has run (ProcessGroup::world() initialised it under mpirun).
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int status = RUN_ALL_TESTS();
  keel::ProcessGroup::world().finalize();
  return status;
}
