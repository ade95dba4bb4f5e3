// ops/host_program.h: replica_products gives each replica's rows the bits of that replica's own
// product (a tensor of its rows alone, as the per-replica step computes it), whether it takes one
// product over all the rows or one per replica; replica_mean_kernel_gradient gives a small kernel's
// gradient the bits of each replica's oneDNN product and the all-reduce's tree mean, whether by the
// chained products or not; and the checks' answers, from their own random operands, hold for other
// operands of the shape.
#include "framework/ops/host_program.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "framework/device/chained_product.h"
#include "framework/device/collectives.h"
#include "framework/ops/gemm.h"
#include "tests/support/grad_check.h"

namespace keel {
namespace {

using testing::random_host;

struct ProductCase {
  int replicas;
  int64_t rows_each, k, m;
  bool transpose_b;
};

// The seed MLP on `v3-8` (its first layer, its second, the second's input gradient), a replica count
// that is not a power of two, and a long reduction: over all 256 rows gemm() cuts the inner dimension
// into segments (other bits) where over a replica's 32 it does not.
const ProductCase kProductCases[] = {{8, 16, 784, 128, false}, {8, 16, 128, 10, false}, {8, 16, 10, 128, true},
                       {3, 32, 300, 64, false},  {8, 32, 2048, 16, false}};

bool bits_equal(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0; }

// Each replica's product of its rows alone, in a tensor of its own; all of them, row after row.
std::vector<float> products_apart(const Tensor& a, const Tensor& b, const ProductCase& c) {
  std::vector<float> out;
  for (int r = 0; r < c.replicas; ++r) {
    Tensor rows = Tensor::empty({c.rows_each, c.k});
    std::memcpy(rows.data(), a.data() + r * c.rows_each * c.k, static_cast<size_t>(c.rows_each * c.k) * sizeof(float));
    Tensor y = Tensor::empty({c.rows_each, c.m});
    if (c.transpose_b) {
      ops::detail::gemm(y.matrix(), rows.matrix(), b.matrix().transpose());
    } else {
      ops::detail::gemm(y.matrix(), rows.matrix(), b.matrix());
    }
    out.insert(out.end(), y.data(), y.data() + y.size());
  }
  return out;
}

TEST(HostProgramTest, ReplicaProductsHaveEachReplicasBits) {
  for (const ProductCase& c : kProductCases) {
    const std::string what = std::to_string(c.replicas) + " x " + std::to_string(c.rows_each) + " rows, k " +
                             std::to_string(c.k) + ", m " + std::to_string(c.m) + (c.transpose_b ? ", b transposed" : "");
    const ReplicaRows rows(std::vector<int64_t>(static_cast<size_t>(c.replicas), c.rows_each));
    const Tensor a = random_host({rows.total(), c.k}, -1.0f, 1.0f, 11);
    const Tensor b = c.transpose_b ? random_host({c.m, c.k}, -1.0f, 1.0f, 12) : random_host({c.k, c.m}, -1.0f, 1.0f, 12);
    Tensor y = Tensor::empty({rows.total(), c.m});
    ops::detail::replica_products(y, a, b, c.transpose_b, rows);
    const std::vector<float> expected = products_apart(a, b, c);
    EXPECT_TRUE(bits_equal(y.data(), expected.data(), y.size())) << what;

    // The probe's answer holds for these operands too: one product over all the rows has the
    // replicas' bits exactly where it says so.
    Tensor whole = Tensor::empty({rows.total(), c.m});
    if (c.transpose_b) {
      ops::detail::gemm(whole.matrix(), a.matrix(), b.matrix().transpose());
    } else {
      ops::detail::gemm(whole.matrix(), a.matrix(), b.matrix());
    }
    EXPECT_EQ(ops::detail::products_split_alike(rows, c.k, c.m, c.transpose_b), bits_equal(whole.data(), expected.data(), whole.size()))
        << what;
  }
  const ReplicaRows long_rows(std::vector<int64_t>(8, 32));
  EXPECT_FALSE(ops::detail::products_split_alike(long_rows, 2048, 16, false)) << "the whole product is cut into segments";
}

struct GradientCase {
  int replicas;
  int64_t rows_each, k, m;
};

// The seed MLP's 128 x 10 kernel on `v3-8`, 3 replicas, and a wide one still under the chained
// products' size (the per-replica step leaves all three to oneDNN and the all-reduce).
const GradientCase kGradientCases[] = {{8, 16, 128, 10}, {3, 32, 100, 12}, {4, 16, 40, 300}};

TEST(HostProgramTest, SmallKernelGradientsHaveTheAllReducesBits) {
  for (const GradientCase& c : kGradientCases) {
    const std::string what = std::to_string(c.replicas) + " x " + std::to_string(c.rows_each) + " rows, " +
                             std::to_string(c.k) + " x " + std::to_string(c.m);
    ASSERT_LT(c.k * c.m, ops::detail::kMinChainedElements) << what;
    const ReplicaRows rows(std::vector<int64_t>(static_cast<size_t>(c.replicas), c.rows_each));
    const Tensor x = random_host({rows.total(), c.k}, -1.0f, 1.0f, 21), dy = random_host({rows.total(), c.m}, -1.0f, 1.0f, 22);
    // Each replica's product in a tensor of its own, then the collectives' tree mean.
    std::vector<Tensor> own;
    std::vector<const float*> in;
    for (int r = 0; r < c.replicas; ++r) {
      Tensor xr = Tensor::empty({c.rows_each, c.k}), dr = Tensor::empty({c.rows_each, c.m});
      std::memcpy(xr.data(), x.data() + rows.begin(r) * c.k, static_cast<size_t>(xr.size()) * sizeof(float));
      std::memcpy(dr.data(), dy.data() + rows.begin(r) * c.m, static_cast<size_t>(dr.size()) * sizeof(float));
      own.push_back(Tensor::empty({c.k, c.m}));
      ops::detail::gemm(own.back().matrix(), xr.matrix().transpose(), dr.matrix());
      in.push_back(own.back().data());
    }
    std::vector<float> want(static_cast<size_t>(c.k * c.m));
    tree_sum_into(in, want.data(), c.k * c.m, c.replicas, /*check=*/false);

    Tensor got = Tensor::empty({c.k, c.m});
    ops::detail::replica_mean_kernel_gradient(got, x, dy, rows);
    EXPECT_TRUE(bits_equal(got.data(), want.data(), got.size())) << what;

    std::vector<ChainedOperands> parts;
    for (int r = 0; r < c.replicas; ++r) {
      parts.push_back({x.data() + rows.begin(r) * c.k, c.k, dy.data() + rows.begin(r) * c.m, c.m, c.rows_each});
    }
    std::vector<float> chained(want.size());
    chained_products(parts, 0, c.k, 0, c.m, chained.data(), c.m, c.replicas);
    EXPECT_EQ(ops::detail::chained_mean_alike(rows, c.k, c.m, c.rows_each),
              kChainedProductsVectorized && bits_equal(chained.data(), want.data(), c.k * c.m))
        << what;
  }
}

}  // namespace
}  // namespace keel
