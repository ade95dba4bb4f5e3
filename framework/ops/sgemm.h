// One float32 matrix product on the calling thread, through oneDNN's sgemm (its JIT AVX-512 kernels
// run the seed MLP's products at about twice the speed of Eigen's GEMM: bench/gemm_bench).
// Row-major; each operand may be read transposed. With Debian's oneDNN 2.6 on this CPU, an element's result depends on the inner
// dimension alone, not on m, n or where a block of the output starts, so tiles of one product
// computed apart give its bits: a property of that build that tests/ops/gemm_test.cc checks on
// keel's shapes, not a promise of oneDNN's. What keel relies on needs less: tiles follow the shape
// alone, so the bits never depend on the thread count.
#pragma once

#include <cstdint>

namespace keel::ops::detail {

// A row-major matrix in memory, read as itself or (transposed) as its transpose.
struct GemmOperand {
  const float* data = nullptr;
  int64_t ld = 0;  // floats between consecutive rows of the matrix as stored
  bool transposed = false;
  // The operand starting at row `r` and column `c` of the matrix it stands for.
  GemmOperand at(int64_t r, int64_t c) const {
    return {transposed ? data + c * ld + r : data + r * ld + c, ld, transposed};
  }
};

// c (m x n, rows ldc floats apart) = a (m x k) · b (k x n), or += with `accumulate`.
void sgemm(GemmOperand a, GemmOperand b, float* c, int64_t ldc, int64_t m, int64_t n, int64_t k, bool accumulate);

// Holds oneDNN's OpenMP threads at one on the calling thread (once per thread): keel's tasks are
// the parallelism, each oneDNN call runs inside one of them.
void hold_onednn_to_this_thread();

}  // namespace keel::ops::detail
