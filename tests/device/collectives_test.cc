#include "framework/device/collectives.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <limits>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "framework/core/random.h"
#include "framework/device/replica_context.h"
#include "framework/device/strategy.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using testing::host;

// Runs `body` with a deadline: a deadlocked collective fails the test run instead of hanging it.
void within_seconds(int seconds, std::function<void()> body) {
  std::packaged_task<void()> task(std::move(body));
  std::future<void> done = task.get_future();
  std::thread t(std::move(task));
  if (done.wait_for(std::chrono::seconds(seconds)) != std::future_status::ready) {
    std::fprintf(stderr, "FATAL: collectives test did not finish within %d s (deadlock?)\n", seconds);
    std::fflush(stderr);
    std::_Exit(1);
  }
  t.join();
  done.get();
}

// Values of very different magnitudes, so that a different summation order changes the bits.
std::vector<float> spread_values(int64_t count, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v) {
    const float scale = (rng.next_u64() & 1) ? 1e7f : 1e-3f;
    x = (rng.next_float() - 0.5f) * scale;
  }
  return v;
}

// The tree's definition, written independently of collectives.cc: a node's value is its own plus
// its children's subtree values, children r + 1, r + 2, r + 4, ... while r is a multiple of twice
// the distance, in increasing distance.
float subtree_sum(const std::vector<std::vector<float>>& x, size_t i, int node, int n) {
  float sum = x[static_cast<size_t>(node)][i];
  for (int d = 1; d < n && node % (2 * d) == 0; d *= 2) {
    if (node + d < n) sum += subtree_sum(x, i, node + d, n);
  }
  return sum;
}

std::vector<float> reference(const std::vector<std::vector<float>>& x, ReduceOp op) {
  const int n = static_cast<int>(x.size());
  std::vector<float> out(x[0].size());
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = subtree_sum(x, i, 0, n);
    if (op == ReduceOp::Mean) out[i] /= static_cast<float>(n);
  }
  return out;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  // memcmp's pointers must not be null, even for 0 bytes (an empty shard's vectors have none).
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST(ReductionTreeTest, EightReplicas) {
  EXPECT_EQ(ReductionTree::parent(0), -1);
  EXPECT_EQ(ReductionTree::parent(5), 4);
  EXPECT_EQ(ReductionTree::parent(6), 4);
  EXPECT_EQ(ReductionTree::parent(4), 0);
  EXPECT_EQ(ReductionTree::children(0, 8), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(ReductionTree::children(4, 8), (std::vector<int>{5, 6}));
  EXPECT_EQ(ReductionTree::children(3, 8), (std::vector<int>{}));
  EXPECT_EQ(ReductionTree::subtree_end(4, 8), 8);
  EXPECT_EQ(ReductionTree::subtree_end(2, 8), 4);
  EXPECT_EQ(ReductionTree::subtree_end(0, 8), 8);
  // Uneven: 5 replicas; node 4 has no children.
  EXPECT_EQ(ReductionTree::children(0, 5), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(ReductionTree::children(4, 5), (std::vector<int>{}));
  EXPECT_EQ(ReductionTree::subtree_end(4, 5), 5);
  EXPECT_EQ(ReductionTree::children(0, 1), (std::vector<int>{}));
}

TEST(TreeSumTest, FollowsTheTreeBitForBit) {
  // 2, 4, 8 and 16 inputs take the one-pass form; the others the level-by-level one.
  for (int n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16}) {
    std::vector<std::vector<float>> x;
    std::vector<const float*> in;
    for (int r = 0; r < n; ++r) x.push_back(spread_values(9000, 100 + static_cast<uint64_t>(r)));
    for (const auto& v : x) in.push_back(v.data());
    std::vector<float> out(9000);
    tree_sum(in, out.data(), 9000);
    EXPECT_TRUE(bitwise_equal(out, reference(x, ReduceOp::Sum))) << n << " replicas";
    // In place, into the first input (as a replica's own buffer receives the sum).
    std::vector<std::vector<float>> y = x;
    std::vector<const float*> y_in;
    for (const auto& v : y) y_in.push_back(v.data());
    tree_sum(y_in, y[0].data(), 9000);
    EXPECT_TRUE(bitwise_equal(y[0], reference(x, ReduceOp::Sum))) << n << " replicas, in place";
  }
}

// The fused form the processes' shared-memory sum uses: the same bits as tree_sum then a division,
// and the first element that is not finite, wherever it falls (a chunk's first or last element, a
// later chunk behind an earlier one, a sum that overflows from finite inputs).
TEST(TreeSumTest, MeanCheckedIsTheSumDividedAndFindsTheFirstNonFinite) {
  const int64_t count = 5000;
  for (int n : {1, 2, 3, 4, 8, 16}) {
    std::vector<std::vector<float>> x;
    std::vector<const float*> in;
    for (int r = 0; r < n; ++r) x.push_back(spread_values(count, 300 + static_cast<uint64_t>(r)));
    for (const auto& v : x) in.push_back(v.data());
    std::vector<float> out(count);
    EXPECT_EQ(tree_mean_checked(in, out.data(), count, n), count) << n;
    EXPECT_TRUE(bitwise_equal(out, reference(x, ReduceOp::Mean))) << n << " replicas";
    EXPECT_EQ(tree_mean_checked(in, out.data(), count, 1), count) << n;
    EXPECT_TRUE(bitwise_equal(out, reference(x, ReduceOp::Sum))) << n << " replicas";
    for (int64_t at : {int64_t{0}, int64_t{1023}, int64_t{1024}, int64_t{4095}, int64_t{4096}, int64_t{4999}}) {
      std::vector<std::vector<float>> bad = x;
      bad[static_cast<size_t>(n - 1)][static_cast<size_t>(at)] = std::numeric_limits<float>::infinity();
      if (at == 1023) bad[0][4000] = std::numeric_limits<float>::quiet_NaN();  // a later one: not the first
      std::vector<const float*> bad_in;
      for (const auto& v : bad) bad_in.push_back(v.data());
      EXPECT_EQ(tree_mean_checked(bad_in, out.data(), count, n), at) << n << " replicas, at " << at;
    }
    std::vector<std::vector<float>> big(static_cast<size_t>(n), std::vector<float>(count, 1.0f));
    for (auto& v : big) v[2500] = std::numeric_limits<float>::max();
    std::vector<const float*> big_in;
    for (const auto& v : big) big_in.push_back(v.data());
    EXPECT_EQ(tree_mean_checked(big_in, out.data(), count, n), n == 1 ? count : 2500) << n << " replicas overflowing";
  }
}

TEST(TreeSumTest, OrderIsObservable) {
  // ((1e8 + 1) + (-1e8 + 1)) = 0 in float, while a left-to-right sum gives 1: the test above could
  // not pass with another order.
  const std::vector<std::vector<float>> x = {{1e8f}, {1.0f}, {-1e8f}, {1.0f}};
  EXPECT_EQ(reference(x, ReduceOp::Sum)[0], 0.0f);
  EXPECT_EQ(((1e8f + 1.0f) + -1e8f) + 1.0f, 1.0f);
}

TEST(ShardRangeTest, FirstReplicasTakeOneMore) {
  EXPECT_EQ(shard_range(10, 3, 0).begin, 0);
  EXPECT_EQ(shard_range(10, 3, 0).end, 4);
  EXPECT_EQ(shard_range(10, 3, 1).begin, 4);
  EXPECT_EQ(shard_range(10, 3, 2).end, 10);
  EXPECT_EQ(shard_range(2, 4, 3).size(), 0);
}

// Per replica, per tensor: the values replica r contributes.
std::vector<float> contribution(int replica, size_t tensor, int64_t size) {
  return spread_values(size, 1000 * static_cast<uint64_t>(replica) + tensor);
}

// all_reduce over tensors of `sizes` on n replicas with `threads` host threads; every replica's
// results, per tensor.
std::vector<std::vector<std::vector<float>>> all_reduce_results(int n, int threads, ReduceOp op,
                                                                const std::vector<int64_t>& sizes) {
  ReplicatedStrategy s(DeviceSpec::custom(n, 0), ReplicatedStrategy::Options{.abstract = false, .host_threads = threads});
  std::vector<std::vector<std::vector<float>>> out(static_cast<size_t>(n));
  within_seconds(60, [&] {
    s.run_replicas([&](ReplicaContext& ctx) {
      std::vector<Tensor> values;
      for (size_t i = 0; i < sizes.size(); ++i) {
        values.push_back(host({sizes[i]}, contribution(ctx.replica_id(), i, sizes[i])).clone());
      }
      ctx.all_reduce(op, values);
      for (const Tensor& v : values) out[static_cast<size_t>(ctx.replica_id())].push_back(v.to_vector());
    });
  });
  return out;
}

TEST(AllReduceTest, EveryReplicaGetsTheTreeOrderedResult) {
  const std::vector<int64_t> sizes = {1, 7, 1031, 2, 4099};  // uneven, and not multiples of n
  for (int n : {1, 2, 3, 8}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean}) {
      const auto got = all_reduce_results(n, 0, op, sizes);
      for (size_t i = 0; i < sizes.size(); ++i) {
        std::vector<std::vector<float>> x;
        for (int r = 0; r < n; ++r) x.push_back(contribution(r, i, sizes[i]));
        const std::vector<float> want = reference(x, op);
        for (int r = 0; r < n; ++r) {
          EXPECT_TRUE(bitwise_equal(got[static_cast<size_t>(r)][i], want))
              << n << " replicas, tensor " << i << ", replica " << r << (op == ReduceOp::Mean ? ", mean" : ", sum");
        }
      }
    }
  }
}

// The optimizer's reduction: each replica's shard of each tensor (shard_range over the replicas,
// which in one process are both the process's and the slice's) holds the tree-ordered mean, and every
// replica gets the same vote: the first tensor with a non-finite mean.
TEST(AllReduceTest, ForUpdateLeavesEachReplicaItsShardOfTheMeanAndOneVote) {
  const std::vector<int64_t> sizes = {1, 7, 1031, 2, 4099};
  for (int n : {2, 3, 8}) {
    for (bool slice_shards : {false, true}) {
      ReplicatedStrategy s(DeviceSpec::custom(n, 0), ReplicatedStrategy::Options{.abstract = false, .host_threads = 2});
      std::vector<std::vector<std::vector<float>>> got(static_cast<size_t>(n));
      std::vector<size_t> votes(static_cast<size_t>(n));
      within_seconds(60, [&] {
        s.run_replicas([&](ReplicaContext& ctx) {
          std::vector<Tensor> values;
          for (size_t i = 0; i < sizes.size(); ++i) {
            std::vector<float> c = contribution(ctx.replica_id(), i, sizes[i]);
            if (i == 2 && ctx.replica_id() == n - 1) c[1000] = std::numeric_limits<float>::infinity();
            values.push_back(host({sizes[i]}, c).clone());
          }
          std::vector<const float*> results(values.size());
          votes[static_cast<size_t>(ctx.replica_id())] =
              ctx.all_reduce_for_update(ReduceOp::Mean, values, slice_shards, results);
          for (size_t i = 0; i < values.size(); ++i) {  // the whole tensor: its shard is compared below
            got[static_cast<size_t>(ctx.replica_id())].emplace_back(results[i], results[i] + values[i].size());
          }
        });
      });
      for (size_t i = 0; i < sizes.size(); ++i) {
        std::vector<std::vector<float>> x;
        for (int r = 0; r < n; ++r) {
          x.push_back(contribution(r, i, sizes[i]));
          if (i == 2 && r == n - 1) x.back()[1000] = std::numeric_limits<float>::infinity();
        }
        const std::vector<float> want = reference(x, ReduceOp::Mean);
        for (int r = 0; r < n; ++r) {
          const ShardRange own = shard_range(sizes[i], n, r);
          const std::vector<float>& mine = got[static_cast<size_t>(r)][i];
          const std::vector<float> part(mine.begin() + own.begin, mine.begin() + own.end);
          const std::vector<float> part_want(want.begin() + own.begin, want.begin() + own.end);
          EXPECT_TRUE(bitwise_equal(part, part_want)) << n << " replicas, tensor " << i << ", replica " << r;
        }
      }
      for (size_t vote : votes) EXPECT_EQ(vote, 2u) << n << " replicas";
    }
  }
}

// Deferred products (framework/device/deferred_product.h): the reduction computes each replica's
// product (when every replica deferred it, with the sum in one pass), whatever rows and columns the
// replicas' ranges start and end in, and gets the bits of the products written whole; a replica may
// also hand a value written whole, and the vote finds a non-finite element inside a product. The
// deferred tensors hold NaNs: read, they would show.
TEST(AllReduceTest, ForUpdateComputesDeferredProductsWithTheBitsOfTheProductsWrittenWhole) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{37, 129}, {1031, 1}, {300, 64}, {5, 3}};
  const std::vector<bool> deferred_tensor = {true, false, true, true};
  // Replica r's operands of tensor i (x: inner x rows, dy: inner x cols) and the product they make.
  struct Operands {
    std::vector<float> x, dy;
    int64_t inner;
  };
  const auto operands = [&](int r, size_t i) {
    const int64_t inner = 2 + static_cast<int64_t>(i) + r % 3;
    Operands o{spread_values(inner * shapes[i].first, 1000 * static_cast<uint64_t>(r) + i),
               spread_values(inner * shapes[i].second, 7000 + 1000 * static_cast<uint64_t>(r) + i), inner};
    if (i == 2 && r == 1) o.dy[8] = std::numeric_limits<float>::infinity();
    return o;
  };
  const auto product = [&](const Operands& o, size_t i) {
    auto p = std::make_shared<DeferredProduct>();
    p->rows = shapes[i].first;
    p->cols = shapes[i].second;
    p->operands = {o.x.data(), p->rows, o.dy.data(), p->cols, o.inner};
    return p;
  };
  const auto value = [&](int r, size_t i) {
    const Operands o = operands(r, i);
    std::vector<float> v(static_cast<size_t>(shapes[i].first * shapes[i].second));
    product(o, i)->compute_rows(0, shapes[i].first, v.data());
    return v;
  };
  for (int n : {2, 3, 8}) {
    ReplicatedStrategy s(DeviceSpec::custom(n, 0), ReplicatedStrategy::Options{.abstract = false, .host_threads = 2});
    std::vector<std::vector<std::vector<float>>> got(static_cast<size_t>(n));
    std::vector<size_t> votes(static_cast<size_t>(n));
    within_seconds(60, [&] {
      s.run_replicas([&](ReplicaContext& ctx) {
        const int r = ctx.replica_id();
        ctx.allow_deferred_products(true);
        std::vector<Tensor> values;
        for (size_t i = 0; i < shapes.size(); ++i) {
          if (!deferred_tensor[i] || (i == 0 && r == n - 1)) {  // written whole (replica n-1: tensor 0 too)
            values.push_back(host({shapes[i].first, shapes[i].second}, value(r, i)).clone());
            continue;
          }
          values.push_back(Tensor::full({shapes[i].first, shapes[i].second}, std::numeric_limits<float>::quiet_NaN()));
          auto kept = std::make_shared<Operands>(operands(r, i));
          auto p = product(*kept, i);
          p->owner = kept;
          ctx.defer(values.back(), p);
        }
        std::vector<const float*> results(values.size());
        votes[static_cast<size_t>(r)] = ctx.all_reduce_for_update(ReduceOp::Mean, values, false, results);
        for (size_t i = 0; i < values.size(); ++i) got[static_cast<size_t>(r)].emplace_back(results[i], results[i] + values[i].size());
        ctx.barrier();  // the results are read in place: every replica has read them before any moves on
      });
    });
    for (size_t i = 0; i < shapes.size(); ++i) {
      std::vector<std::vector<float>> x;
      for (int r = 0; r < n; ++r) x.push_back(value(r, i));
      const std::vector<float> want = reference(x, ReduceOp::Mean);
      for (int r = 0; r < n; ++r) {
        const ShardRange own = shard_range(static_cast<int64_t>(want.size()), n, r);
        const std::vector<float>& mine = got[static_cast<size_t>(r)][i];
        EXPECT_TRUE(bitwise_equal(std::vector<float>(mine.begin() + own.begin, mine.begin() + own.end),
                                  std::vector<float>(want.begin() + own.begin, want.begin() + own.end)))
            << n << " replicas, tensor " << i << ", replica " << r;
      }
    }
    for (size_t vote : votes) EXPECT_EQ(vote, 2u) << n << " replicas";
  }
}

TEST(AllReduceTest, SameBitsOnOneTwoOrEightThreads) {
  const std::vector<int64_t> sizes = {5, 3000, 17};
  const auto one = all_reduce_results(8, 1, ReduceOp::Mean, sizes);
  for (int threads : {2, 8}) {
    const auto got = all_reduce_results(8, threads, ReduceOp::Mean, sizes);
    for (size_t r = 0; r < 8; ++r) {
      for (size_t i = 0; i < sizes.size(); ++i) EXPECT_TRUE(bitwise_equal(got[r][i], one[r][i])) << threads << " threads";
    }
  }
}

TEST(AllReduceTest, CountsBytesAndChargesAReceiveBufferOnCoresWithChildren) {
  for (bool abstract : {false, true}) {
    ReplicatedStrategy s(DeviceSpec::custom(4, 0), ReplicatedStrategy::Options{.abstract = abstract, .host_threads = 0});
    within_seconds(60, [&] {
      s.run_replicas([&](ReplicaContext& ctx) {
        std::vector<Tensor> values = {Tensor::zeros({10}), Tensor::zeros({3, 5})};  // 40 + 60 bytes
        ctx.all_reduce(ReduceOp::Sum, values);
      });
    });
    // Tree: 0 <- {1, 2}, 2 <- {3}. Each link carries the 100 bytes up and the result down.
    const int64_t links[] = {2, 1, 2, 1};
    const int64_t receive_buffer[] = {60, 0, 60, 0};  // the largest tensor, while partial sums arrive
    for (int c = 0; c < 4; ++c) {
      const TransferStat t = s.ledger().core(c).transfers();
      EXPECT_EQ(t.sent_bytes, links[c] * 100) << c << (abstract ? " abstract" : "");
      EXPECT_EQ(t.received_bytes, links[c] * 100) << c;
      EXPECT_EQ(t.collective_count, 1) << c;
      const MemoryStat w = s.ledger().core(c).stat(Category::workspace);
      EXPECT_EQ(w.peak, receive_buffer[c]) << c;
      EXPECT_EQ(w.current, 0) << c;
      EXPECT_EQ(w.allocated, receive_buffer[c]) << c;
    }
  }
}

TEST(ReduceScatterTest, EachReplicaGetsItsShardOfTheReducedValue) {
  for (int n : {1, 2, 3, 8}) {
    ReplicatedStrategy s(DeviceSpec::custom(n, 0));
    constexpr int64_t kSize = 1001;
    std::vector<std::vector<float>> got(static_cast<size_t>(n));
    within_seconds(60, [&] {
      s.run_replicas([&](ReplicaContext& ctx) {
        const Tensor value = host({7, 143}, contribution(ctx.replica_id(), 0, kSize)).clone();
        got[static_cast<size_t>(ctx.replica_id())] = ctx.reduce_scatter(ReduceOp::Mean, value).to_vector();
      });
    });
    std::vector<std::vector<float>> x;
    for (int r = 0; r < n; ++r) x.push_back(contribution(r, 0, kSize));
    const std::vector<float> want = reference(x, ReduceOp::Mean);
    int64_t sent = 0, received = 0;
    for (int r = 0; r < n; ++r) {
      const ShardRange shard = shard_range(kSize, n, r);
      EXPECT_TRUE(bitwise_equal(got[static_cast<size_t>(r)], std::vector<float>(want.begin() + shard.begin, want.begin() + shard.end)))
          << n << " replicas, replica " << r;
      sent += s.ledger().core(r).transfers().sent_bytes;
      received += s.ledger().core(r).transfers().received_bytes;
    }
    EXPECT_EQ(sent, received) << "every byte sent is received";
  }
}

TEST(AllGatherTest, ConcatenatesUnevenShardsInReplicaOrder) {
  for (int n : {1, 2, 3, 8}) {
    ReplicatedStrategy s(DeviceSpec::custom(n, 0));
    std::vector<std::vector<float>> got(static_cast<size_t>(n));
    std::vector<Shape> shapes(static_cast<size_t>(n));
    within_seconds(60, [&] {
      s.run_replicas([&](ReplicaContext& ctx) {
        const int r = ctx.replica_id();
        const Tensor shard = Tensor::full({r % 3, 2}, static_cast<float>(r));  // 0, 1 or 2 rows
        const Tensor all = ctx.all_gather(shard);
        got[static_cast<size_t>(r)] = all.to_vector();
        shapes[static_cast<size_t>(r)] = all.shape();
      });
    });
    std::vector<float> want;
    for (int r = 0; r < n; ++r) want.insert(want.end(), static_cast<size_t>(2 * (r % 3)), static_cast<float>(r));
    int64_t sent = 0, received = 0;
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(got[static_cast<size_t>(r)], want) << n << " replicas, replica " << r;
      EXPECT_EQ(shapes[static_cast<size_t>(r)], (Shape{static_cast<int64_t>(want.size() / 2), 2}));
      sent += s.ledger().core(r).transfers().sent_bytes;
      received += s.ledger().core(r).transfers().received_bytes;
    }
    EXPECT_EQ(sent, received);
  }
}

// Each replica writes its shard_range of its own copy; afterwards every copy is whole. With copies in
// separate buffers (the general case) and with one host buffer shared by every replica (mirrored
// variables), the bytes counted are those of a tree all-gather of the shards.
TEST(AllGatherShardsTest, EveryCopyGetsEveryShard) {
  for (int n : {1, 2, 3, 8}) {
    for (bool shared : {false, true}) {
      ReplicatedStrategy s(DeviceSpec::custom(n, 0));
      constexpr int64_t kSize = 37;
      Tensor common = Tensor::zeros({kSize});
      std::vector<std::vector<float>> got(static_cast<size_t>(n));
      within_seconds(60, [&] {
        s.run_replicas([&](ReplicaContext& ctx) {
          const int r = ctx.replica_id();
          Tensor mine = shared ? common : Tensor::full({kSize}, -1.0f);
          const ShardRange range = shard_range(kSize, n, r);
          for (int64_t i = range.begin; i < range.end; ++i) mine.data()[i] = static_cast<float>(i * 10 + r);
          std::vector<Tensor> values = {mine, Tensor()};
          ctx.all_gather_shards(values);
          got[static_cast<size_t>(r)] = mine.to_vector();
        });
      });
      std::vector<float> want(kSize);
      for (int r = 0; r < n; ++r) {
        const ShardRange range = shard_range(kSize, n, r);
        for (int64_t i = range.begin; i < range.end; ++i) want[static_cast<size_t>(i)] = static_cast<float>(i * 10 + r);
      }
      int64_t sent = 0, received = 0;
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(got[static_cast<size_t>(r)], want) << n << " replicas, replica " << r << (shared ? ", shared" : "");
        sent += s.ledger().core(r).transfers().sent_bytes;
        received += s.ledger().core(r).transfers().received_bytes;
        // A non-root core receives the whole tensor, and sends its subtree's shards up.
        if (r != 0) EXPECT_GE(s.ledger().core(r).transfers().received_bytes, kSize * 4) << r;
      }
      EXPECT_EQ(sent, received);
      if (n > 1) EXPECT_GT(sent, 0);
    }
  }
}

TEST(BroadcastTest, EveryReplicaGetsTheRootsValue) {
  ReplicatedStrategy s(DeviceSpec::custom(4, 0));
  std::vector<std::vector<float>> got(4);
  within_seconds(60, [&] {
    s.run_replicas([&](ReplicaContext& ctx) {
      Tensor value = Tensor::full({3}, static_cast<float>(ctx.replica_id()));
      ctx.broadcast(value, /*root=*/2);
      got[static_cast<size_t>(ctx.replica_id())] = value.to_vector();
    });
  });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(got[static_cast<size_t>(r)], std::vector<float>(3, 2.0f)) << r;
  // Rooted at 2: relative ids 0..3 are replicas 2, 3, 0, 1; relative 0 sends to 1 and 2, 2 to 3.
  EXPECT_EQ(s.ledger().core(2).transfers().sent_bytes, 2 * 12);
  EXPECT_EQ(s.ledger().core(2).transfers().received_bytes, 0);
  EXPECT_EQ(s.ledger().core(0).transfers().sent_bytes, 12);
  for (int r : {0, 1, 3}) EXPECT_EQ(s.ledger().core(r).transfers().received_bytes, 12) << r;
}

TEST(CollectivesTest, MismatchedShapesAreABugInTheCaller) {
  ReplicatedStrategy s(DeviceSpec::custom(2, 0));
  within_seconds(60, [&] {
    EXPECT_THROW(s.run_replicas([&](ReplicaContext& ctx) {
      std::vector<Tensor> values = {Tensor::zeros({ctx.replica_id() + 1})};
      ctx.all_reduce(ReduceOp::Sum, values);
    }),
                 std::logic_error);
  });
  within_seconds(60, [&] {
    EXPECT_THROW(s.run_replicas([&](ReplicaContext& ctx) {
      Tensor value = Tensor::zeros({ctx.replica_id() + 1});
      ctx.broadcast(value, 0);
    }),
                 std::logic_error);
  });
}

TEST(CollectivesTest, BarrierWaitsForEveryReplica) {
  ReplicatedStrategy s(DeviceSpec::custom(4, 0), ReplicatedStrategy::Options{.abstract = false, .host_threads = 2});
  std::atomic<int> arrived{0};
  std::vector<int> seen(4);
  within_seconds(60, [&] {
    s.run_replicas([&](ReplicaContext& ctx) {
      ++arrived;
      ctx.barrier();
      seen[static_cast<size_t>(ctx.replica_id())] = arrived.load();
    });
  });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(seen[static_cast<size_t>(r)], 4) << r;
}

}  // namespace
}  // namespace keel
