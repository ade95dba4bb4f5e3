// ops/gemm.h: a product cut into tiles gives the bits of one oneDNN product over the whole matrix,
// for plain, transposed and accumulating products, on the shapes keel's layers make, and agrees with
// Eigen's product up to rounding; a long reduction cut into segments is within rounding of it; and
// both give the same bits on 1 to 4 threads.
#include "framework/ops/gemm.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "framework/core/thread_pool.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using testing::random_host;

struct Case {
  int64_t m, k, n;
};

// Dense layers (the MLP: batch 128, 784 -> 512 -> 10, and their gradients), im2col chunks of
// convolutions (rows of pixels x 3x3 patches), kernel gradients (patch x channels over pixels), odd
// sizes and remainders shorter than a tile. The sanitized build (tests at -O0, no AVX-512) takes the
// small ones: the same tile bounds, a fraction of the arithmetic.
#if KEEL_TESTS_SANITIZED
const Case kCases[] = {{128, 200, 200}, {97, 300, 10}, {193, 120, 300}, {50, 70, 600}, {330, 64, 64},
                       {1, 500, 300},   {300, 500, 1}, {0, 5, 5},       {200, 96, 200}, {400, 32, 192}};
const Case kLongReductions[] = {{64, 2048, 256}, {147, 1536, 64}};
#else
const Case kCases[] = {{128, 784, 512}, {784, 128, 512}, {128, 512, 10}, {128, 784, 128}, {256, 784, 128}, {100, 1000, 100}, {1820, 576, 64}, {576, 1820, 64},
                       {64, 6272, 256}, {97, 300, 10},   {193, 1000, 1000}, {50, 70, 600}, {4608, 227, 512},
                       {330, 4608, 64}, {147, 7000, 64}, {1, 500, 300},    {300, 500, 1},  {0, 5, 5}};
const Case kLongReductions[] = {{64, 25088, 256}, {147, 7133, 64}, {576, 1820, 64}};
#endif

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.size() != b.size()) return false;
  return a.size() == 0 || std::memcmp(a.data(), b.data(), static_cast<size_t>(a.size()) * sizeof(float)) == 0;
}

// One product over the whole matrix, untiled.
void whole(Tensor& c, const ops::detail::GemmOperand& a, const ops::detail::GemmOperand& b, int64_t k,
           bool accumulate = false) {
  ops::detail::sgemm(a, b, c.data(), c.dim(1), c.dim(0), c.dim(1), k, accumulate);
}

void expect_near_eigen(const Tensor& got, const MatrixRM& eigen, int64_t k, const std::string& what) {
  const float tolerance = 1e-6f * static_cast<float>(k + 1);  // |terms| <= 1, k of them
  for (int64_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got.data()[i], eigen.data()[i], tolerance) << what << " at " << i;
  }
}

TEST(GemmTest, TilesGiveTheBitsOfOneProduct) {
  using ops::detail::gemm_operand;
  uint64_t seed = 1;
  int tiled = 0;
  for (const Case& c : kCases) {
    if (ops::detail::gemm_segments(c.m, c.n, c.k) > 1) continue;  // below
    if (ops::detail::gemm_tiles(c.m, c.n, c.k).count() > 1) ++tiled;
    const std::string what = std::to_string(c.m) + "x" + std::to_string(c.k) + "x" + std::to_string(c.n);
    const Tensor a = random_host({c.m, c.k}, -1, 1, seed++), b = random_host({c.k, c.n}, -1, 1, seed++);
    const Tensor at = random_host({c.k, c.m}, -1, 1, seed++), start = random_host({c.m, c.n}, -1, 1, seed++);
    Tensor want = Tensor::empty({c.m, c.n}), got = Tensor::empty({c.m, c.n});
    whole(want, gemm_operand(a.matrix()), gemm_operand(b.matrix()), c.k);
    ops::detail::gemm(got.matrix(), a.matrix(), b.matrix());
    EXPECT_TRUE(same_bits(want, got)) << what;
    expect_near_eigen(got, a.matrix() * b.matrix(), c.k, what);
    whole(want, gemm_operand(at.matrix().transpose()), gemm_operand(b.matrix()), c.k);
    ops::detail::gemm(got.matrix(), at.matrix().transpose(), b.matrix());
    EXPECT_TRUE(same_bits(want, got)) << "transposed " << what;
    expect_near_eigen(got, at.matrix().transpose() * b.matrix(), c.k, "transposed " + what);
    want = start.clone();
    got = start.clone();
    whole(want, gemm_operand(a.matrix()), gemm_operand(b.matrix()), c.k, /*accumulate=*/true);
    ops::detail::gemm(got.matrix(), a.matrix(), b.matrix(), /*accumulate=*/true);
    EXPECT_TRUE(same_bits(want, got)) << "accumulating " << what;
    expect_near_eigen(got, start.matrix() + a.matrix() * b.matrix(), c.k, "accumulating " + what);
  }
  EXPECT_GE(tiled, KEEL_TESTS_SANITIZED ? 3 : 6);  // products cut into several tiles
}

// Kernel gradients: (patch x channels) reduced over many pixels, as convolutions make them.
TEST(GemmTest, ALongReductionInSegmentsIsOneProductUpToRoundingOnAnyThreads) {
  uint64_t seed = 40;
  for (const Case& c : kLongReductions) {
    ASSERT_GT(ops::detail::gemm_segments(c.m, c.n, c.k), 1) << c.m << "x" << c.k << "x" << c.n;
    const Tensor at = random_host({c.k, c.m}, -1, 1, seed++), b = random_host({c.k, c.n}, -1, 1, seed++);
    const Tensor start = random_host({c.m, c.n}, -1, 1, seed++);
    Tensor want = start.clone(), one = start.clone();
    whole(want, ops::detail::gemm_operand(at.matrix().transpose()), ops::detail::gemm_operand(b.matrix()), c.k,
          /*accumulate=*/true);
    ops::detail::gemm(one.matrix(), at.matrix().transpose(), b.matrix(), /*accumulate=*/true);
    for (int64_t i = 0; i < want.size(); ++i) ASSERT_NEAR(one.data()[i], want.data()[i], 2e-3) << i;
    for (int threads : {2, 3, 4}) {
      const KernelThreadsScope share(threads);
      Tensor got = start.clone();
      ops::detail::gemm(got.matrix(), at.matrix().transpose(), b.matrix(), /*accumulate=*/true);
      EXPECT_TRUE(same_bits(one, got)) << c.m << "x" << c.k << "x" << c.n << ", " << threads << " threads";
    }
  }
}

TEST(GemmTest, TheSameBitsOnOneToFourThreads) {
  const int64_t m = KEEL_TESTS_SANITIZED ? 400 : 1000, n = KEEL_TESTS_SANITIZED ? 200 : 700;
  const Tensor a = random_host({m, 300}, -1, 1, 7), b = random_host({300, n}, -1, 1, 8);
  Tensor one = Tensor::empty({m, n});
  ops::detail::gemm(one.matrix(), a.matrix(), b.matrix());
  for (int threads : {2, 3, 4}) {
    const KernelThreadsScope share(threads);
    Tensor got = Tensor::empty({m, n});
    ops::detail::gemm(got.matrix(), a.matrix(), b.matrix());
    EXPECT_TRUE(same_bits(one, got)) << threads;
  }
}

TEST(GemmTest, TilesFollowTheShapeAlone) {
  using ops::detail::kGemmTileUnit;
  // Tiles of an axis within a unit of each other, bounds at multiples of it, covering the axis.
  const auto expect_balanced = [](const ops::detail::TileAxis& a, int64_t size, const char* what) {
    EXPECT_EQ(a.begin(0), 0) << what;
    EXPECT_EQ(a.end(a.tiles - 1), size) << what;
    for (int64_t i = 0; i < a.tiles; ++i) {
      EXPECT_EQ(a.begin(i) % kGemmTileUnit, 0) << what << " tile " << i;
      EXPECT_LE(std::abs((a.end(i) - a.begin(i)) - size / a.tiles), kGemmTileUnit) << what << " tile " << i;
    }
  };
  // Rows in as many tiles as row blocks fit; under kGemmTargetTiles of them, columns in as many
  // as make up the target.
  const ops::detail::GemmTiles t = ops::detail::gemm_tiles(1000, 512, 300);
  EXPECT_EQ(t.rows.tiles, 1000 / ops::detail::kGemmRowBlock);
  expect_balanced(t.rows, 1000, "1000 rows");
  EXPECT_EQ(t.cols.tiles, 2);
  expect_balanced(t.cols, 512, "512 columns");
  EXPECT_EQ(ops::detail::gemm_tiles(2000, 512, 300).cols.tiles, 1);
  // Few row tiles: columns are cut too, into nearly equal tiles.
  const ops::detail::GemmTiles k = ops::detail::gemm_tiles(64, 256, 6272);
  EXPECT_EQ(k.rows.tiles, 1);
  EXPECT_GT(k.cols.tiles, 1);
  expect_balanced(k.cols, 256, "256 columns");
  // An even count of tiles where there are several: 5 row blocks of 96 in 512 rows become 6 tiles.
  const ops::detail::GemmTiles five = ops::detail::gemm_tiles(512, 128, 512);
  EXPECT_EQ(five.count() % 2, 0);
  expect_balanced(five.rows, 512, "512 rows");
  // One row tile of much work and too few columns to cut: rows at multiples of the fine row block
  // (the seed MLP's first layer).
  const ops::detail::GemmTiles mlp = ops::detail::gemm_tiles(128, 128, 784);
  EXPECT_EQ(mlp.rows.tiles, 4);
  EXPECT_EQ(mlp.rows.block % ops::detail::kGemmFineRowBlock, 0);
  EXPECT_EQ(mlp.cols.tiles, 1);
  // Little work: one tile.
  EXPECT_EQ(ops::detail::gemm_tiles(8, 8, 8).count(), 1);
}

}  // namespace
}  // namespace keel
