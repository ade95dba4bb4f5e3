// The seed MLP's matrix products on one thread: Eigen's GEMM (what keel used before) beside oneDNN's
// sgemm (framework/ops/sgemm.h, what keel's gemm.h tiles call), microseconds per product, best of
// REPEATS rounds of 200 after a warm-up; and keel's tiled gemm() on 1 and 2 threads. Then the same
// two large products as `v3-8`'s eight replicas compute them, on 16 rows each (`replicas_8x16`):
// eight sgemm calls with the operands in cache, to tell the shapes' cost from the memory's in a step;
// and those kernel gradients with their tree sum (the all-reduce's), apart or fused over tiles of
// 112 rows (each replica's tile into a scratch that stays in cache, then the tile's tree sum), and
// keel's chained products (framework/device/chained_product.h, what the step runs now): whether they
// have oneDNN's bits on this build (each element one chain of fused multiply-adds) and what they cost,
// summed and as the replicas' mean (what the step's all-reduce stores).
// Usage: gemm_bench [repeats]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <Eigen/Dense>

#include "framework/core/tensor.h"
#include "framework/core/thread_pool.h"
#include "framework/device/chained_product.h"
#include "framework/device/collectives.h"
#include "framework/ops/gemm.h"
#include "framework/ops/sgemm.h"

namespace {

template <class F>
double best_microseconds(int repeats, F f) {
  for (int i = 0; i < 50; ++i) f();
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 200; ++i) f();
    best = std::min(best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 200);
  }
  return best;
}

struct Shape {
  int64_t m, n, k;
  bool a_transposed;  // a stored k x m, read transposed (a kernel's gradient: xᵀ · dy)
  const char* what;
};

// The seed MLP's first layer as 8 replicas of 16 rows compute it: 8 forward products of 16 rows, and
// 8 kernel gradients over 16 rows, each into an output of its own (the copies the all-reduce sums),
// against the one product of 128 rows; oneDNN's sgemm on one thread.
void replica_products(int repeats) {
  constexpr int64_t kRows = 128, kIn = 784, kOut = 128, kReplicas = 8, kShard = kRows / kReplicas;
  std::vector<float> x(kRows * kIn, 0.5f), w(kIn * kOut, 0.25f), y(kRows * kOut), dy(kRows * kOut, 0.125f);
  std::vector<std::vector<float>> dw(kReplicas, std::vector<float>(kIn * kOut));
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.001f * static_cast<float>(static_cast<int64_t>(i % 2003) - 1001);  // rounding to compare
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = 0.001f * static_cast<float>(static_cast<int64_t>(i % 1997) - 998);
  using keel::ops::detail::GemmOperand;
  using keel::ops::detail::sgemm;
  const GemmOperand xs{x.data(), kIn, false}, ws{w.data(), kOut, false}, xt{x.data(), kIn, true}, dys{dy.data(), kOut, false};
  const double forward_1 = best_microseconds(repeats, [&] { sgemm(xs, ws, y.data(), kOut, kRows, kOut, kIn, false); });
  const double forward_8 = best_microseconds(repeats, [&] {
    for (int64_t r = 0; r < kReplicas; ++r) sgemm(xs.at(r * kShard, 0), ws, y.data() + r * kShard * kOut, kOut, kShard, kOut, kIn, false);
  });
  const double kernel_1 = best_microseconds(repeats, [&] { sgemm(xt, dys, dw[0].data(), kOut, kIn, kOut, kRows, false); });
  const double kernel_8 = best_microseconds(repeats, [&] {
    for (int64_t r = 0; r < kReplicas; ++r) {
      sgemm(xt.at(0, r * kShard), dys.at(r * kShard, 0), dw[static_cast<size_t>(r)].data(), kOut, kIn, kOut, kShard, false);
    }
  });
  // The kernel gradients and their tree sum, apart (as a step computes them) and fused over tiles.
  std::vector<float> sum(kIn * kOut), fused(kIn * kOut);
  std::vector<const float*> parts(kReplicas);
  const double summed_apart = best_microseconds(repeats, [&] {
    for (int64_t r = 0; r < kReplicas; ++r) {
      sgemm(xt.at(0, r * kShard), dys.at(r * kShard, 0), dw[static_cast<size_t>(r)].data(), kOut, kIn, kOut, kShard, false);
      parts[static_cast<size_t>(r)] = dw[static_cast<size_t>(r)].data();
    }
    keel::tree_sum(parts, sum.data(), kIn * kOut);
  });
  constexpr int64_t kTile = 112;
  std::vector<float> scratch(kReplicas * kTile * kOut);
  const double summed_fused = best_microseconds(repeats, [&] {
    for (int64_t row = 0; row < kIn; row += kTile) {
      const int64_t rows = std::min(kTile, kIn - row);
      for (int64_t r = 0; r < kReplicas; ++r) {
        float* tile = scratch.data() + r * kTile * kOut;
        sgemm(xt.at(row, r * kShard), dys.at(r * kShard, 0), tile, kOut, rows, kOut, kShard, false);
        parts[static_cast<size_t>(r)] = tile;
      }
      keel::tree_sum(parts, fused.data() + row * kOut, rows * kOut);
    }
  });
  std::vector<keel::ChainedOperands> operands;
  for (int64_t r = 0; r < kReplicas; ++r) operands.push_back({x.data() + r * kShard * kIn, kIn, dy.data() + r * kShard * kOut, kOut, kShard});
  std::vector<float> chained(kIn * kOut);
  const double summed_chained =
      best_microseconds(repeats, [&] { keel::chained_products(operands, 0, kIn, 0, kOut, chained.data(), kOut, 1); });
  std::vector<float> mean(kIn * kOut);  // the replicas' mean, as the step's all-reduce computes it
  const double mean_chained = best_microseconds(
      repeats, [&] { keel::chained_products(operands, 0, kIn, 0, kOut, mean.data(), kOut, static_cast<int>(kReplicas)); });
  std::printf("{\"product\": \"kernel gradients of 8 replicas x 16 rows and their tree sum\", \"apart_us\": %.1f, "
              "\"fused_over_112_row_tiles_us\": %.1f, \"same_bits\": %s, \"keel_chained_us\": %.1f, "
              "\"chained_bits_as_onednn\": %s, \"keel_chained_mean_us\": %.1f}\n",
              summed_apart, summed_fused, std::equal(sum.begin(), sum.end(), fused.begin()) ? "true" : "false", summed_chained,
              std::equal(sum.begin(), sum.end(), chained.begin()) ? "true" : "false", mean_chained);
  std::printf("{\"product\": \"forward, dense: 128x784 . 784x128\", \"onednn_sgemm_us\": %.1f, \"replicas_8x16_us\": %.1f}\n",
              forward_1, forward_8);
  std::printf("{\"product\": \"kernel gradient, dense: (128x784)T . 128x128\", \"onednn_sgemm_us\": %.1f, "
              "\"replicas_8x16_us\": %.1f}\n",
              kernel_1, kernel_8);
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 5;
  if (repeats < 1) {
    std::fprintf(stderr, "usage: gemm_bench [repeats >= 1]\n");
    return 2;
  }
  using keel::ConstMatrixMap;
  using keel::MatrixMap;
  const Shape shapes[] = {{128, 128, 784, false, "forward, dense: 128x784 . 784x128"},
                          {784, 128, 128, true, "kernel gradient, dense: (128x784)T . 128x128"},
                          {128, 10, 128, false, "forward, dense_1: 128x128 . 128x10"}};
  for (const Shape& s : shapes) {
    std::vector<float> a(static_cast<size_t>(s.m * s.k)), b(static_cast<size_t>(s.k * s.n)), c(static_cast<size_t>(s.m * s.n));
    for (size_t i = 0; i < a.size(); ++i) a[i] = 0.001f * static_cast<float>(static_cast<int64_t>(i % 2001) - 1000);
    for (size_t i = 0; i < b.size(); ++i) b[i] = 0.001f * static_cast<float>(static_cast<int64_t>(i % 1999) - 999);
    const double flops = 2.0 * static_cast<double>(s.m * s.n * s.k);
    MatrixMap cm(c.data(), s.m, s.n);
    const ConstMatrixMap bm(b.data(), s.k, s.n);
    const ConstMatrixMap am(a.data(), s.a_transposed ? s.k : s.m, s.a_transposed ? s.m : s.k);
    double eigen = 0.0, onednn = 0.0, tiled[2] = {0.0, 0.0};
    if (s.a_transposed) {
      eigen = best_microseconds(repeats, [&] { cm.noalias() = am.transpose() * bm; });
      onednn = best_microseconds(repeats, [&] {
        keel::ops::detail::sgemm(keel::ops::detail::gemm_operand(am.transpose()), keel::ops::detail::gemm_operand(bm), c.data(),
                                 s.n, s.m, s.n, s.k, false);
      });
      for (int t : {1, 2}) {
        const keel::KernelThreadsScope share(t);
        tiled[t - 1] = best_microseconds(repeats, [&] { keel::ops::detail::gemm(cm, am.transpose(), bm); });
      }
    } else {
      eigen = best_microseconds(repeats, [&] { cm.noalias() = am * bm; });
      onednn = best_microseconds(repeats, [&] {
        keel::ops::detail::sgemm(keel::ops::detail::gemm_operand(am), keel::ops::detail::gemm_operand(bm), c.data(), s.n, s.m,
                                 s.n, s.k, false);
      });
      for (int t : {1, 2}) {
        const keel::KernelThreadsScope share(t);
        tiled[t - 1] = best_microseconds(repeats, [&] { keel::ops::detail::gemm(cm, am, bm); });
      }
    }
    std::printf("{\"product\": \"%s\", \"eigen_us\": %.1f, \"onednn_sgemm_us\": %.1f, \"onednn_gflops\": %.1f, "
                "\"keel_gemm_1_thread_us\": %.1f, \"keel_gemm_2_threads_us\": %.1f}\n",
                s.what, eigen, onednn, flops / onednn * 1e-3, tiled[0], tiled[1]);
  }
  replica_products(repeats);
  return 0;
}
