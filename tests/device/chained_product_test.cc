#include "framework/device/chained_product.h"

#include <array>
#include <cmath>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "framework/core/float_environment.h"
#include "framework/core/random.h"
#include "framework/device/collectives.h"

namespace keel {
namespace {

// Values of very different magnitudes, so that another order of the same additions changes the bits.
std::vector<float> spread(int64_t count, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v) x = (rng.next_float() - 0.5f) * ((rng.next_u64() & 1) ? 1e6f : 1e-3f);
  return v;
}

struct Part {
  std::vector<float> x, dy;  // inner x rows, inner x cols
  int64_t inner;
  ChainedOperands operands(int64_t rows, int64_t cols) const { return {x.data(), rows, dy.data(), cols, inner}; }
};

Part make_part(int64_t inner, int64_t rows, int64_t cols, uint64_t seed) {
  return {spread(inner * rows, seed), spread(inner * cols, seed + 7777), inner};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

using Kernel = void (*)(std::span<const ChainedOperands>, int64_t, int64_t, int64_t, int64_t, float*, int64_t, int);
const Kernel kKernels[] = {&chained_products, &detail::chained_products_portable};

// The definition, written out: one fused multiply-add per row, in row order, from zero.
TEST(ChainedProductTest, EveryElementIsOneChainOfFusedMultiplyAddsInRowOrder) {
  for (const auto& [inner, rows, cols] : std::vector<std::array<int64_t, 3>>{{16, 19, 70}, {1, 8, 32}, {37, 3, 5}, {0, 9, 17}, {16, 29, 10}, {5, 14, 16}}) {
    const Part p = make_part(inner, rows, cols, static_cast<uint64_t>(inner * 100 + rows));
    std::vector<float> want(static_cast<size_t>(rows * cols));
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        float acc = 0.0f;
        for (int64_t k = 0; k < inner; ++k) acc = std::fma(p.x[k * rows + i], p.dy[k * cols + j], acc);
        want[i * cols + j] = acc;
      }
    }
    for (Kernel kernel : kKernels) {
      std::vector<float> got(want.size(), -1.0f);
      const ChainedOperands o = p.operands(rows, cols);
      kernel({&o, 1}, 0, rows, 0, cols, got.data(), cols, 1);
      EXPECT_TRUE(same_bits(got, want)) << inner << " x " << rows << " x " << cols;
    }
  }
}

// The products of 1 to 17 parts (and 32) summed in one pass: the bits of each product computed alone
// and then tree_sum_into's sum and mean; any block of rows and columns has the whole's bits.
TEST(ChainedProductTest, PartsAreSummedInTheReductionTreesOrderWhateverTheBlock) {
  const int64_t rows = 21, cols = 45;
  std::vector<int> counts;
  for (int n = 1; n <= 17; ++n) counts.push_back(n);
  counts.push_back(32);
  for (int n : counts) {
    std::vector<Part> parts;
    std::vector<ChainedOperands> operands;
    for (int r = 0; r < n; ++r) parts.push_back(make_part(16 + r % 3, rows, cols, 50 + static_cast<uint64_t>(r)));
    for (const Part& p : parts) operands.push_back(p.operands(rows, cols));
    std::vector<std::vector<float>> alone(static_cast<size_t>(n), std::vector<float>(rows * cols));
    std::vector<const float*> in;
    for (int r = 0; r < n; ++r) {
      chained_products({&operands[static_cast<size_t>(r)], 1}, 0, rows, 0, cols, alone[static_cast<size_t>(r)].data(), cols, 1);
      in.push_back(alone[static_cast<size_t>(r)].data());
    }
    for (int divisor : {1, n}) {
      std::vector<float> want(rows * cols);
      tree_sum_into(in, want.data(), rows * cols, divisor, false);
      for (Kernel kernel : kKernels) {
        std::vector<float> got(want.size());
        kernel(operands, 0, rows, 0, cols, got.data(), cols, divisor);
        EXPECT_TRUE(same_bits(got, want)) << n << " parts, divisor " << divisor;
        std::vector<float> block((11 - 3) * (40 - 5));
        kernel(operands, 3, 11, 5, 40, block.data(), 40 - 5, divisor);
        for (int64_t i = 3; i < 11; ++i) {
          EXPECT_EQ(std::memcmp(block.data() + (i - 3) * 35, want.data() + i * cols + 5, 35 * sizeof(float)), 0) << n << " parts, row " << i;
        }
      }
    }
  }
}

// A value whose rows [5, 5 + 21) are the parts' product and whose other rows are zeros: any block of
// its rows and columns has the bits of zeros and of chained_products' rows shifted by 5.
TEST(ChainedProductTest, AValuesRowsOutsideTheProductAreZeros) {
  const int64_t rows = 21, cols = 45, first = 5, value_rows = 33;
  std::vector<Part> parts;
  std::vector<ChainedOperands> operands;
  for (int r = 0; r < 3; ++r) parts.push_back(make_part(16, rows, cols, 70 + static_cast<uint64_t>(r)));
  for (const Part& p : parts) operands.push_back(p.operands(rows, cols));
  std::vector<float> product(rows * cols);
  chained_products(operands, 0, rows, 0, cols, product.data(), cols, 2);
  std::vector<float> want(value_rows * cols, 0.0f);
  std::copy(product.begin(), product.end(), want.begin() + first * cols);
  for (const auto& [begin, end, c0, c1] : std::vector<std::array<int64_t, 4>>{
           {0, value_rows, 0, cols}, {0, 3, 0, cols}, {3, 9, 7, 40}, {20, 31, 0, 45}, {26, 33, 1, 2}, {6, 7, 0, 45}}) {
    std::vector<float> got((end - begin) * (c1 - c0), -1.0f);
    chained_value_rows(operands, first, rows, begin, end, c0, c1, got.data(), c1 - c0, 2);
    for (int64_t i = begin; i < end; ++i) {
      EXPECT_EQ(std::memcmp(got.data() + (i - begin) * (c1 - c0), want.data() + i * cols + c0, (c1 - c0) * sizeof(float)), 0)
          << "rows [" << begin << ", " << end << "), row " << i;
    }
  }
}

TEST(ChainedProductTest, RefusesNoPartsAndMoreThanItsTreeHolds) {
  float out = 0.0f;
  EXPECT_THROW(chained_products({}, 0, 1, 0, 1, &out, 1, 1), std::logic_error);
  const std::vector<ChainedOperands> many(static_cast<size_t>(kMaxChainedParts) + 1);
  EXPECT_THROW(chained_products(many, 0, 1, 0, 1, &out, 1, 1), std::logic_error);
}

// The means multiply by the reciprocal where the divisor is a power of two: every float, normal,
// subnormal or not finite, and every result's rounding (into the subnormals too), as dividing gives,
// with and without flush-to-zero; a divisor of another kind divides.
TEST(ChainedProductTest, MeansOverPowersOfTwoMultiplyWithTheBitsOfDividing) {
  EXPECT_FALSE(divides_by_reciprocal(1));
  EXPECT_FALSE(divides_by_reciprocal(3));
  EXPECT_FALSE(divides_by_reciprocal(12));
  for (int k = 1; k <= 8; ++k) EXPECT_TRUE(divides_by_reciprocal(1 << k));
  Rng rng(11);
  std::vector<float> x(1 << 16);
  for (float& v : x) {
    const auto bits = static_cast<uint32_t>(rng.next_u64());
    std::memcpy(&v, &bits, sizeof v);  // every exponent, subnormals, infinities and NaNs among them
  }
  for (bool flush : {false, true}) {
    for (int divisor : {2, 8, 64, 256}) {
      std::vector<float> divided(x.size()), multiplied(x.size());
      {
        std::optional<FlushSubnormals> mode;
        if (flush) mode.emplace();
        const float d = static_cast<float>(divisor);
        volatile float r = 1.0f / d;  // as the kernels compute it
        for (size_t i = 0; i < x.size(); ++i) {
          divided[i] = x[i] / d;
          multiplied[i] = x[i] * r;
        }
      }
      for (size_t i = 0; i < x.size(); ++i) {
        if (std::isnan(divided[i])) {
          EXPECT_TRUE(std::isnan(multiplied[i]));
        } else {
          ASSERT_EQ(std::memcmp(&divided[i], &multiplied[i], sizeof(float)), 0) << x[i] << " / " << divisor;
        }
      }
    }
  }
}

}  // namespace
}  // namespace keel
