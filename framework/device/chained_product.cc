// chained_products: blocks of 7 rows x 32 columns of the result (a range's last rows: 4 x 64, 2 x 128,
// 1 x 128), each replica's chain accumulated in registers (14 AVX-512 vectors, two replicas' blocks
// at a time and added there; 16 or 8), then added to the partial sums of the replicas before them as
// the binomial tree adds them (a stack of one partial block per tree level), then divided and stored.
// With AVX2 and FMA the same in 8-lane vectors (blocks of 4 rows x 16 columns); with neither, the same
// arithmetic through std::fma. The same bits on every path.
#include "framework/device/chained_product.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <stdexcept>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

namespace keel {
namespace {

constexpr int kRowBlock = kChainedBlockRows;
constexpr int kColBlock = 32;
constexpr int kLevels = 9;  // tree levels of up to kMaxChainedParts parts, plus the running one
// How many rows of x and dy ahead a chain asks for its operands (bench/gemm_bench's keel_chained_us,
// one thread: 177-178 us with 4 or 8 against 178-182 without, 185 before the loop walked pointers).
constexpr int64_t kPrefetchRows = 4;

// The tree's bookkeeping: after part r's block `cur` is computed, the partial sums it completes are
// added in front of it (left + right, as ReductionTree's nodes add their children); what stays
// incomplete waits at its level. After the last part, the waiting partials are added from the lowest
// level up: a node's sum is its own block followed by its children's, and the later children's
// subtrees are the lower levels. From level 1 (`first_level`), for an odd r whose pair r - 1, r is
// already added in `cur` (the level-0 addition, done in registers).
template <class Block, class AddLeft>
void tree_step(int r, int parts, Block& cur, Block* stack, AddLeft add_left, int first_level = 0) {
  int level = first_level;
  for (int bit = r >> first_level; (bit & 1) != 0; bit >>= 1, ++level) add_left(stack[level], cur);
  if (r != parts - 1) {
    stack[level] = cur;
    return;
  }
  for (int l = std::countr_zero(static_cast<unsigned>(parts)) + 1; l < kLevels; ++l) {
    if (((parts >> l) & 1) != 0) add_left(stack[l], cur);
  }
}

// Rows [i, i + rows) and columns [j, j + cols) element by element (rows, cols at most a block).
void block_portable(std::span<const ChainedOperands> parts, int64_t i, int rows, int64_t j, int cols, float* out,
                    int64_t ldo, int divisor) {
  using Block = float[kRowBlock][kColBlock];
  struct Holder {
    Block v;
  };
  Holder cur{}, stack[kLevels]{};
  const int n = static_cast<int>(parts.size());
  for (int r = 0; r < n; ++r) {
    const ChainedOperands& p = parts[static_cast<size_t>(r)];
    for (int a = 0; a < rows; ++a) {  // a row's columns side by side, which a compiler can vectorize
      float* acc = cur.v[a];
      std::fill_n(acc, kColBlock, 0.0f);
      for (int64_t k = 0; k < p.inner; ++k) {
        const float xa = p.x[k * p.ldx + i + a];
        const float* dy = p.dy + k * p.ldy + j;
        for (int b = 0; b < cols; ++b) acc[b] = std::fma(xa, dy[b], acc[b]);
      }
    }
    tree_step(r, n, cur, stack, [rows, cols](const Holder& left, Holder& right) {
      for (int a = 0; a < rows; ++a) {
        for (int b = 0; b < cols; ++b) right.v[a][b] = left.v[a][b] + right.v[a][b];
      }
    });
  }
  for (int a = 0; a < rows; ++a) {
    for (int b = 0; b < cols; ++b) {
      out[a * ldo + b] = divisor > 1 ? cur.v[a][b] / static_cast<float>(divisor) : cur.v[a][b];
    }
  }
}

// Rows [i, i + rows) over columns [col_begin, col_end) in blocks of kColBlock columns.
void rows_block_portable(std::span<const ChainedOperands> parts, int64_t i, int rows, int64_t col_begin, int64_t col_end,
                         float* out, int64_t ldo, int divisor) {
  for (int64_t j = col_begin; j < col_end; j += kColBlock) {
    const int cols = static_cast<int>(std::min<int64_t>(kColBlock, col_end - j));
    block_portable(parts, i, rows, j, cols, out + (j - col_begin), ldo, divisor);
  }
}

// The vector instructions the blocks are written in: AVX-512 (16 lanes, 32 registers) or AVX2 with
// FMA (8 lanes, 16 registers); masked loads give zeros past a block's last column, masked stores
// leave them alone. Every lane does what the portable form does for its element: the same bits.
#if defined(__AVX512F__)
#define KEEL_CHAINED_SIMD 1
struct Simd {
  using V = __m512;
  using Mask = __mmask16;
  static constexpr int kLanes = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V load(Mask m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
  static void store(Mask m, float* p, V v) { _mm512_mask_storeu_ps(p, m, v); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static Mask mask(int64_t lanes) {
    return lanes >= 16 ? static_cast<Mask>(0xFFFF) : static_cast<Mask>((1u << std::max<int64_t>(lanes, 0)) - 1u);
  }
};
#elif defined(__AVX2__) && defined(__FMA__)
#define KEEL_CHAINED_SIMD 1
struct Simd {
  using V = __m256;
  using Mask = __m256i;
  static constexpr int kLanes = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V load(Mask m, const float* p) { return _mm256_maskload_ps(p, m); }
  static void store(Mask m, float* p, V v) { _mm256_maskstore_ps(p, m, v); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static Mask mask(int64_t lanes) {
    const int n = static_cast<int>(std::clamp<int64_t>(lanes, 0, 8));
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
};
#endif

#if defined(KEEL_CHAINED_SIMD)
// A block of IB rows and JV vectors of columns (masks: each vector's columns).
template <int IB, int JV>
struct Block {
  Simd::V v[IB][JV];
};

// right = left + right, vector by vector (a tree node's addition).
template <int IB, int JV>
inline void add_left(const Block<IB, JV>& left, Block<IB, JV>& right) {
#pragma GCC unroll 16
  for (int a = 0; a < IB; ++a) {
#pragma GCC unroll 16
    for (int v = 0; v < JV; ++v) right.v[a][v] = Simd::add(left.v[a][v], right.v[a][v]);
  }
}

// One part's product over the block, IB x JV chains in flight: enough to keep the FMA units busy
// through the FMA's latency.
template <int IB, int JV>
inline __attribute__((always_inline)) void chain_simd(const ChainedOperands& p, int64_t i, int64_t j,
                                                      const Simd::Mask* masks, Block<IB, JV>& cur) {
  using V = Simd::V;
  constexpr int W = Simd::kLanes;
#pragma GCC unroll 16
  for (int a = 0; a < IB; ++a) {
#pragma GCC unroll 16
    for (int v = 0; v < JV; ++v) cur.v[a][v] = Simd::zero();
  }
  const float* x = p.x + i;
  const float* dy = p.dy + j;
  const int64_t ldx = p.ldx, ldy = p.ldy;
  // Unrolled: a 7 x 2 block's loop, not unrolled, took 1.8 times as long on an AMD EPYC.
#pragma GCC unroll 4
  for (int64_t k = p.inner; k > 0; --k, x += ldx, dy += ldy) {
    _mm_prefetch(reinterpret_cast<const char*>(x + kPrefetchRows * ldx), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(dy + kPrefetchRows * ldy), _MM_HINT_T0);
    V d[JV];
#pragma GCC unroll 16
    for (int v = 0; v < JV; ++v) d[v] = Simd::load(masks[v], dy + W * v);
#pragma GCC unroll 16
    for (int a = 0; a < IB; ++a) {
      const V xa = Simd::set1(x[a]);
#pragma GCC unroll 16
      for (int v = 0; v < JV; ++v) cur.v[a][v] = Simd::fma(xa, d[v], cur.v[a][v]);
    }
  }
}

// The block's sum divided by `divisor`, stored.
template <int IB, int JV>
void store_block(const Block<IB, JV>& cur, const Simd::Mask* masks, float* out, int64_t ldo, int divisor) {
  using V = Simd::V;
  constexpr int W = Simd::kLanes;
  const V dv = Simd::set1(static_cast<float>(divisor));
  const V scale = Simd::set1(1.0f / static_cast<float>(divisor));
  const bool multiply = divides_by_reciprocal(divisor);
#pragma GCC unroll 16
  for (int a = 0; a < IB; ++a) {
#pragma GCC unroll 16
    for (int v = 0; v < JV; ++v) {
      const V s = multiply ? Simd::mul(cur.v[a][v], scale) : divisor > 1 ? Simd::div(cur.v[a][v], dv) : cur.v[a][v];
      Simd::store(masks[v], out + a * ldo + W * v, s);
    }
  }
}

// The parts one at a time, each block added into the tree's stack (stored there but the last).
template <int IB, int JV>
void block_simd(std::span<const ChainedOperands> parts, int64_t i, int64_t j, const Simd::Mask* masks, float* out,
                int64_t ldo, int divisor) {
  Block<IB, JV> cur{}, stack[kLevels];  // {}: what the compiler cannot see, that parts is never empty
  const int n = static_cast<int>(parts.size());
  for (int r = 0; r < n; ++r) {
    chain_simd(parts[static_cast<size_t>(r)], i, j, masks, cur);
    tree_step(r, n, cur, stack, add_left<IB, JV>);
  }
  store_block(cur, masks, out, ldo, divisor);
}

// The parts two at a time: a pair's products in two register blocks (the first waiting while the
// second is computed), added there: the tree's level 0 without a store, half the stores and reloads
// of block_simd.
template <int IB, int JV>
void block_pairs_simd(std::span<const ChainedOperands> parts, int64_t i, int64_t j, const Simd::Mask* masks,
                      float* out, int64_t ldo, int divisor) {
  Block<IB, JV> left, cur, stack[kLevels];
  const int n = static_cast<int>(parts.size());
  int r = 0;
  for (; r + 1 < n; r += 2) {
    chain_simd(parts[static_cast<size_t>(r)], i, j, masks, left);
    chain_simd(parts[static_cast<size_t>(r + 1)], i, j, masks, cur);
    add_left(left, cur);
    tree_step(r + 1, n, cur, stack, add_left<IB, JV>, 1);
  }
  if (r < n) {  // an odd count's last part
    chain_simd(parts[static_cast<size_t>(r)], i, j, masks, cur);
    tree_step(r, n, cur, stack, add_left<IB, JV>);
  }
  store_block(cur, masks, out, ldo, divisor);
}

// Rows [i, i + IB) over columns [col_begin, col_end) in blocks of JV vectors, parts two at a time
// where kPairs.
template <int IB, int JV, bool kPairs = false>
void rows_simd(std::span<const ChainedOperands> parts, int64_t i, int64_t col_begin, int64_t col_end, float* out,
               int64_t ldo, int divisor) {
  constexpr int W = Simd::kLanes;
  for (int64_t j = col_begin; j < col_end; j += W * JV) {
    Simd::Mask masks[JV];
    for (int v = 0; v < JV; ++v) masks[v] = Simd::mask(col_end - j - W * v);
    if constexpr (kPairs) {
      block_pairs_simd<IB, JV>(parts, i, j, masks, out + (j - col_begin), ldo, divisor);
    } else {
      block_simd<IB, JV>(parts, i, j, masks, out + (j - col_begin), ldo, divisor);
    }
  }
}
#endif

// Up to kRowBlock rows [i, i + rows) over columns [col_begin, col_end). AVX-512: 7 rows by blocks of
// 32 columns, parts two at a time (2 x 14 chains in 32 registers: each dy vector loaded feeds 7
// multiply-adds, and a pair's sum never leaves the registers: 14-row blocks of one part at a time
// stored and read back 7 x 28 vectors a block for 8 parts; on an AMD EPYC the seed MLP's step on
// `v3-8` went from 0.933 to 0.945 of `cpu`'s speed, two alternate runs of each build of
// KEEL_NUM_THREADS=1 build/bench/mlp_step_ab), the last rows of a range as 4, 2 and 1 rows by
// blocks with as many chains in flight; a range of at most 16 columns (a 10-class layer's kernel) in
// blocks of one vector, 14 rows and fewer (half the multiply-adds of 32-column blocks there). AVX2:
// blocks of 4 rows by 16 columns, 2 by 32, 1 by 32.
void rows_block(std::span<const ChainedOperands> parts, int64_t i, int rows, int64_t col_begin, int64_t col_end,
                float* out, int64_t ldo, int divisor) {
  int a = 0;
#if defined(__AVX512F__)
  if (col_end - col_begin <= Simd::kLanes) {  // one vector of columns: no chains over masked-off lanes
    if (rows - a >= 14) rows_simd<14, 1>(parts, i + a, col_begin, col_end, out + a * ldo, ldo, divisor), a += 14;
    if (rows - a >= 8) rows_simd<8, 1>(parts, i + a, col_begin, col_end, out + a * ldo, ldo, divisor), a += 8;
    if (rows - a >= 4) rows_simd<4, 1>(parts, i + a, col_begin, col_end, out + a * ldo, ldo, divisor), a += 4;
    if (rows - a >= 2) rows_simd<2, 1>(parts, i + a, col_begin, col_end, out + a * ldo, ldo, divisor), a += 2;
    if (rows - a >= 1) rows_simd<1, 1>(parts, i + a, col_begin, col_end, out + a * ldo, ldo, divisor);
    return;
  }
  for (; rows - a >= 7; a += 7) rows_simd<7, 2, true>(parts, i + a, col_begin, col_end, out + a * ldo, ldo, divisor);
  if (rows - a >= 4) rows_simd<4, 4>(parts, i + a, col_begin, col_end, out + a * ldo, ldo, divisor), a += 4;
  if (rows - a >= 2) rows_simd<2, 8>(parts, i + a, col_begin, col_end, out + a * ldo, ldo, divisor), a += 2;
  if (rows - a >= 1) rows_simd<1, 8>(parts, i + a, col_begin, col_end, out + a * ldo, ldo, divisor);
#elif defined(KEEL_CHAINED_SIMD)
  for (; rows - a >= 4; a += 4) rows_simd<4, 2>(parts, i + a, col_begin, col_end, out + a * ldo, ldo, divisor);
  if (rows - a >= 2) rows_simd<2, 4>(parts, i + a, col_begin, col_end, out + a * ldo, ldo, divisor), a += 2;
  if (rows - a >= 1) rows_simd<1, 4>(parts, i + a, col_begin, col_end, out + a * ldo, ldo, divisor);
#else
  rows_block_portable(parts, i, rows, col_begin, col_end, out, ldo, divisor);
#endif
}

template <class RowsFn>
void for_each_block(std::span<const ChainedOperands> parts, int64_t begin, int64_t end, int64_t col_begin,
                    int64_t col_end, float* out, int64_t ldo, int divisor, RowsFn fn) {
  if (parts.empty() || parts.size() > static_cast<size_t>(kMaxChainedParts)) {
    throw std::logic_error("chained_products: between 1 and 256 parts");
  }
  for (int64_t i = begin; i < end; i += kRowBlock) {
    const int rows = static_cast<int>(std::min<int64_t>(kRowBlock, end - i));
    fn(parts, i, rows, col_begin, col_end, out + (i - begin) * ldo, ldo, divisor);
  }
}

}  // namespace

void chained_products(std::span<const ChainedOperands> parts, int64_t begin, int64_t end, int64_t col_begin,
                      int64_t col_end, float* out, int64_t ldo, int divisor) {
  for_each_block(parts, begin, end, col_begin, col_end, out, ldo, divisor, rows_block);
}

void chained_value_rows(std::span<const ChainedOperands> parts, int64_t first_row, int64_t product_rows, int64_t begin,
                        int64_t end, int64_t col_begin, int64_t col_end, float* out, int64_t ldo, int divisor) {
  const int64_t lo = std::clamp(first_row, begin, end), hi = std::clamp(first_row + product_rows, lo, end);
  const auto zero_rows = [&](int64_t from, int64_t to) {
    for (int64_t r = from; r < to; ++r) std::fill(out + (r - begin) * ldo, out + (r - begin) * ldo + (col_end - col_begin), 0.0f);
  };
  zero_rows(begin, lo);
  if (hi > lo) chained_products(parts, lo - first_row, hi - first_row, col_begin, col_end, out + (lo - begin) * ldo, ldo, divisor);
  zero_rows(hi, end);
}

namespace detail {
void chained_products_portable(std::span<const ChainedOperands> parts, int64_t begin, int64_t end, int64_t col_begin,
                               int64_t col_end, float* out, int64_t ldo, int divisor) {
  for_each_block(parts, begin, end, col_begin, col_end, out, ldo, divisor, rows_block_portable);
}
}  // namespace detail

}  // namespace keel
