// ops/host_program.h: replica_products gives each replica's rows the bits of that replica's own
// product (a tensor of its rows alone, as the per-replica step computes it), whether it takes one
// product over all the rows or one per replica; and products_split_alike's answer, from its own
// random operands, holds for other operands of the shape.
#include "framework/ops/host_program.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

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

}  // namespace
}  // namespace keel
