// Matrix products on a replica's share of the compute threads (framework/core/thread_pool.h).
//
// The product is cut into tiles of the output, fixed by its shape alone: row bounds at multiples of
// kGemmRowBlock, column bounds (where rows alone give few tiles) at multiples of kGemmColBlock, a
// short remainder joining the tile before it. Each tile is one oneDNN sgemm over the whole inner
// dimension (ops/sgemm.h), whose value for an element does not depend on the tile around it: a tiled
// product has the bits of one product over the whole matrix, whichever thread computes each tile
// and however many threads there are (tests/ops/gemm_test.cc). Only long reductions with few tiles
// are cut along the inner dimension too (gemm_segments, below).
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "framework/core/tensor.h"
#include "framework/core/thread_pool.h"
#include "framework/device/chained_product.h"
#include "framework/ops/sgemm.h"

namespace keel::ops::detail {

inline constexpr int64_t kGemmRowBlock = 96;
// Work per thread below which a product uses fewer threads (only the threads, never the bits).
inline constexpr double kGemmMinFlopsPerThread = 8e6;
// Work per tile (multiply-adds x 2) below which tiles grow: the tile grid, never the thread count.
inline constexpr double kGemmGrainFlops = 2e6;

// [begin, end) of tile `i` of an axis of `n` cut at multiples of `block` (the last tile takes the
// remainder), or, balanced, into `tiles` tiles of nearly equal size with bounds at multiples of
// `block` (evenly, below).
struct TileAxis {
  int64_t n = 0, block = 1, tiles = 1;
  bool balanced = false;
  TileAxis(int64_t size, int64_t blk) : n(size), block(std::max<int64_t>(blk, 1)), tiles(std::max<int64_t>(1, size / block)) {}
  int64_t begin(int64_t i) const { return balanced ? i * n / tiles / block * block : i * block; }
  int64_t end(int64_t i) const { return i + 1 == tiles ? n : begin(i + 1); }
  // `count` tiles (fewer where a tile would be under `unit`), bounds at multiples of `unit`.
  static TileAxis evenly(int64_t size, int64_t count, int64_t unit) {
    TileAxis a(size, unit);
    a.tiles = std::clamp<int64_t>(count, 1, std::max<int64_t>(1, size / a.block));
    a.balanced = true;
    return a;
  }
};

// Rows per tile: kGemmRowBlock, or a multiple of it when a tile of that many rows is little work.
inline int64_t gemm_row_block(int64_t cols, int64_t inner) {
  const double per_block = 2.0 * static_cast<double>(kGemmRowBlock) * static_cast<double>(std::max<int64_t>(cols, 1)) *
                           static_cast<double>(std::max<int64_t>(inner, 1));
  const int64_t f = per_block >= kGemmGrainFlops ? 1 : static_cast<int64_t>(kGemmGrainFlops / per_block) + 1;
  return kGemmRowBlock * std::min<int64_t>(f, int64_t{1} << 20);
}

// The tiles of an (m x n) output over an inner dimension k: rows first; columns cut too when there
// are fewer than kGemmTargetTiles row tiles and the work allows it, as for a kernel's gradient, a few
// hundred rows long and reduced over thousands of pixels. The tiles of an axis are of nearly equal
// size, bounds at multiples of kGemmTileUnit, and a product of several tiles has an even count of them:
// on two threads the last tile never runs alone. (Until 2026-11-29 rows were cut at multiples of
// kGemmRowBlock and columns of kGemmColBlock, remainders joining the last tile: ResNet50's 1x1
// convolutions at 32x32 came in 2, 5, 7 or 21 tiles of unequal size, and one thread waited for the
// other's last tile.)
inline constexpr int64_t kGemmColBlock = 96;
inline constexpr int64_t kGemmTargetTiles = 16;
inline constexpr int64_t kGemmTileUnit = 16;
struct GemmTiles {
  TileAxis rows, cols;
  int64_t count() const { return rows.tiles * cols.tiles; }
};
// A product of a few hundred rows too narrow to cut its columns, worth several tiles (the seed MLP's
// first layer, 128 x 784 x 128, 26 MFLOP): rows cut at multiples of kGemmFineRowBlock instead, at
// least 2 x kGemmGrainFlops each (4 tiles of 32 rows for the MLP: a helper that starts late still
// finds tiles left; +5% over 2 tiles, 5 interleaved pairs of bench/mlp_throughput).
inline constexpr int64_t kGemmFineRowBlock = 32;
inline GemmTiles gemm_tiles(int64_t m, int64_t n, int64_t k) {
  const int64_t row_tiles = std::max<int64_t>(1, m / gemm_row_block(n, k));
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  int64_t col_tiles = 1;
  if (row_tiles < kGemmTargetTiles && n >= 2 * kGemmColBlock) {
    const int64_t by_work = static_cast<int64_t>(flops / kGemmGrainFlops) / row_tiles;
    col_tiles = std::clamp<int64_t>(std::min((kGemmTargetTiles + row_tiles - 1) / row_tiles, by_work), 1, n / kGemmColBlock);
  } else if (row_tiles == 1) {
    const int64_t want = std::min({m / kGemmFineRowBlock, static_cast<int64_t>(flops / (2 * kGemmGrainFlops)), kGemmTargetTiles});
    if (want > 1) return {TileAxis(m, (m / want + kGemmFineRowBlock - 1) / kGemmFineRowBlock * kGemmFineRowBlock), TileAxis(n, n)};
  }
  TileAxis rows = TileAxis::evenly(m, row_tiles, kGemmTileUnit), cols = TileAxis::evenly(n, col_tiles, kGemmTileUnit);
  if (const int64_t count = rows.tiles * cols.tiles; count > 1 && count % 2 == 1) {
    // One more tile on the column axis where it can take one, else on the row axis.
    if (cols.tiles > 1 && n / (cols.tiles + 1) >= kGemmTileUnit) {
      cols = TileAxis::evenly(n, cols.tiles + 1, kGemmTileUnit);
    } else if (m / (rows.tiles + 1) >= kGemmTileUnit) {
      rows = TileAxis::evenly(m, rows.tiles + 1, kGemmTileUnit);
    }
  }
  return {rows, cols};
}

// Long reductions with few tiles (a kernel's gradient, (patch x channels) summed over thousands of
// pixels): the inner dimension is cut into segments, each segment's product computed on its own into
// a scratch buffer, and the partial products added in segment order. The segments follow the shape
// alone, so the bits do not depend on the threads (they are not those of one product: the sums are
// grouped differently). Scratch is host memory of the calling thread, reused, outside the ledger: a
// TPU core would need no such buffer.
inline constexpr int64_t kGemmSegment = 512;
inline int64_t gemm_segments(int64_t m, int64_t n, int64_t k) {
  const int64_t tiles = gemm_tiles(m, n, k).count();
  if (tiles >= kGemmTargetTiles) return 1;
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const int64_t by_work = static_cast<int64_t>(flops / (4 * kGemmGrainFlops));
  return std::max<int64_t>(1, std::min({kGemmTargetTiles / tiles, k / kGemmSegment, by_work}));
}
// A replicated layer's kernel gradient (k x width, each replica's over its m rows, summed over
// `replicas`) that keel's chained products compute on every path, not oneDNN: the replica's own
// product, the all-reduce's deferred one, a column-parallel core's columns of it
// (framework/device/chained_product.h). A shape's choice, the same on every path. Smaller gradients,
// and those whose inner dimension gemm() cuts, stay oneDNN's, as all of them do in a build without
// vector instructions for the chained products.
inline constexpr int64_t kMinChainedElements = 1 << 14;
inline bool chained_kernel_gradient(int64_t k, int64_t width, int64_t m, int replicas) {
  return kChainedProductsVectorized && replicas >= 2 && k * width >= kMinChainedElements && gemm_segments(k, width, m) == 1;
}
inline float* gemm_scratch(size_t floats) {
  thread_local std::vector<float> scratch;
  if (scratch.size() < floats) scratch.resize(floats);
  return scratch.data();
}

// The operands gemm() takes: row-major maps and their transposes.
inline GemmOperand gemm_operand(const MatrixMap& m) { return {m.data(), m.outerStride(), false}; }
inline GemmOperand gemm_operand(const ConstMatrixMap& m) { return {m.data(), m.outerStride(), false}; }
template <class Nested>
GemmOperand gemm_operand(const Eigen::Transpose<Nested>& t) {
  GemmOperand o = gemm_operand(t.nestedExpression());
  o.transposed = !o.transposed;
  return o;
}

// out (m x n, rows ldc floats apart) = a (m x k) · b (k x n), or += with `accumulate`. With
// `as_if_columns` (> n), out is columns of a product that many columns wide (a column-parallel layer's
// share, framework/ops/column_parallel.cc): the inner dimension is cut as that product's would be, so
// each element gets the bits it has there. A product cut along the inner dimension needs ldc == n.
inline void gemm_operands(float* out, int64_t ldc, int64_t m, int64_t n, int64_t k, GemmOperand a, GemmOperand b,
                          bool accumulate = false, int64_t as_if_columns = 0) {
  if (m == 0 || n == 0) return;
  if (const int64_t segments = gemm_segments(m, std::max(n, as_if_columns), k); segments > 1) {
    if (ldc != n) throw std::logic_error("gemm: a product cut along its inner dimension writes a whole matrix");
    const TileAxis seg(k, (k + segments - 1) / segments);
    const int64_t mn = m * n;
    float* partial = gemm_scratch(static_cast<size_t>(seg.tiles * mn));
    parallel_for(seg.tiles, [&](int64_t s) {
      sgemm(a.at(0, seg.begin(s)), b.at(seg.begin(s), 0), partial + s * mn, n, m, n, seg.end(s) - seg.begin(s),
            /*accumulate=*/false);
    });
    const int64_t block = 1 << 14;
    parallel_for(
        (mn + block - 1) / block,
        [&](int64_t i) {
          for (int64_t e = i * block; e < std::min(mn, (i + 1) * block); ++e) {
            float v = accumulate ? out[e] + partial[e] : partial[e];
            for (int64_t s = 1; s < seg.tiles; ++s) v += partial[s * mn + e];
            out[e] = v;
          }
        },
        threads_worth(static_cast<double>(mn * seg.tiles), kMinElementsPerThread));
    return;
  }
  const GemmTiles tiles = gemm_tiles(m, n, k);
  const auto tile = [&](int64_t t) {
    const int64_t r = t / tiles.cols.tiles, c = t % tiles.cols.tiles;
    const int64_t r0 = tiles.rows.begin(r), c0 = tiles.cols.begin(c);
    sgemm(a.at(r0, 0), b.at(0, c0), out + r0 * ldc + c0, ldc, tiles.rows.end(r) - r0, tiles.cols.end(c) - c0, k,
          accumulate);
  };
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  parallel_for(tiles.count(), tile, threads_worth(flops, kGemmMinFlopsPerThread));
}

// dst (m x n) = a (m x k) * b (k x n), or += with `accumulate`. dst is a row-major map (MatrixMap);
// a and b row-major maps or their transposes.
template <class Lhs, class Rhs>
void gemm(MatrixMap dst, const Lhs& a_expr, const Rhs& b_expr, bool accumulate = false) {
  const int64_t m = dst.rows(), n = dst.cols(), k = a_expr.cols();
  if (m == 0 || n == 0) return;
  if (a_expr.rows() != m || b_expr.rows() != k || b_expr.cols() != n) {
    throw std::logic_error("gemm: a " + std::to_string(a_expr.rows()) + "x" + std::to_string(k) + " by " +
                           std::to_string(b_expr.rows()) + "x" + std::to_string(b_expr.cols()) + " product into " +
                           std::to_string(m) + "x" + std::to_string(n));
  }
  gemm_operands(dst.data(), dst.outerStride(), m, n, k, gemm_operand(a_expr), gemm_operand(b_expr), accumulate);
}

}  // namespace keel::ops::detail
