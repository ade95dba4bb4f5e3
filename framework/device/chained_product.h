// The kernel gradients a replicated dense layer's all-reduce sums (and a pointwise convolution's over
// few pixels: ops/replicated_kernel_gradient.h), computed by keel itself: each
// replica's xᵀ · dy over its own rows, every element one chain of fused multiply-adds in row order
// (acc = fma(x[k][i], dy[k][j], acc) for k = 0, 1, ...), and the replicas' products added in
// ReductionTree's order (framework/device/collectives.h) while each block of the result is still in
// registers.
//
// Why not oneDNN, as every other product: on `v3-8` the seed MLP's eight products over 16 rows each
// cost eight oneDNN calls per tile of the result plus a tree sum that reads them back
// (bench/gemm_bench: 164 us against 129 us fused here, the time of one product over all 128 rows).
// And the bits are defined here, not by a library build: every path that computes such a gradient
// (the deferred all-reduce, a replica's own product when the step cannot defer it, a column-parallel
// layer's columns of it, under any thread or process count) calls this kernel, so they agree by
// construction. Elements are independent: any split of rows or columns gives the same bits. Written
// for AVX-512, for AVX2 with FMA, and portably (framework/device/chained_product.cc).
#pragma once

#include <bit>
#include <cstdint>
#include <span>

namespace keel {

// One replica's operands: x (inner x rows of the result, row-major, `ldx` floats a row) and dy
// (inner x cols, `ldy` floats a row); the product is xᵀ · dy, (rows x cols).
struct ChainedOperands {
  const float* x = nullptr;
  int64_t ldx = 0;
  const float* dy = nullptr;
  int64_t ldy = 0;
  int64_t inner = 0;
};

// Whether this build computes them in vector instructions (AVX-512, or AVX2 with FMA; the whole
// library is built with one set of flags). Without, the portable form's std::fma calls are slow, and
// keel leaves these gradients to oneDNN on every path (ops::detail::chained_kernel_gradient).
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
inline constexpr bool kChainedProductsVectorized = true;
#else
inline constexpr bool kChainedProductsVectorized = false;
#endif

// Whether x / divisor is x * (1 / divisor) for every float x, whatever the flush-to-zero mode: for
// a power of two both are x·2⁻ᵏ correctly rounded (the reciprocal is exact). A vector division costs
// several multiplications' time (AVX-512: one per 10-16 cycles), so the replicas' means multiply
// where that gives the same bits.
inline bool divides_by_reciprocal(int divisor) {
  return divisor > 1 && std::has_single_bit(static_cast<unsigned>(divisor));
}

// Rows [begin, end) and columns [col_begin, col_end) of Σ_r parts[r]'s product, summed in
// ReductionTree's order over the parts (replica ids 0, 1, ... in span order) and divided by
// `divisor` when it is > 1, into out (its row `begin`, column `col_begin` at out[0]; `ldo` floats a
// row). With one part, divisor 1: that replica's product alone. At most kMaxChainedParts parts.
inline constexpr int kMaxChainedParts = 256;
// Rows of the result each block of chained_products computes (fewer at a range's end): a range that
// starts and ends at multiples of it runs whole blocks only.
inline constexpr int kChainedBlockRows = 14;
void chained_products(std::span<const ChainedOperands> parts, int64_t begin, int64_t end, int64_t col_begin,
                      int64_t col_end, float* out, int64_t ldo, int divisor);

// chained_products over the rows of a value whose rows [first_row, first_row + product_rows) are
// the parts' (summed) product and whose other rows are zeros: rows [begin, end) of the value, as
// chained_products writes them (out at row begin, column col_begin).
void chained_value_rows(std::span<const ChainedOperands> parts, int64_t first_row, int64_t product_rows, int64_t begin,
                        int64_t end, int64_t col_begin, int64_t col_end, float* out, int64_t ldo, int divisor);

namespace detail {
// chained_products without vector instructions (what a build for a CPU with neither AVX-512 nor AVX2
// and FMA runs): the same bits, which
// tests/device/chained_product_test.cc checks where both are built.
void chained_products_portable(std::span<const ChainedOperands> parts, int64_t begin, int64_t end, int64_t col_begin,
                               int64_t col_end, float* out, int64_t ldo, int divisor);
}  // namespace detail

}  // namespace keel
