#include "framework/ops/sgemm.h"

#include <omp.h>

#include <algorithm>
#include <oneapi/dnnl/dnnl.h>
#include <stdexcept>
#include <string>

namespace keel::ops::detail {

void hold_onednn_to_this_thread() {
  thread_local const bool held = (omp_set_num_threads(1), true);
  (void)held;
}

void sgemm(GemmOperand a, GemmOperand b, float* c, int64_t ldc, int64_t m, int64_t n, int64_t k, bool accumulate) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty inner dimension: oneDNN is not asked to read zero-length rows
    if (!accumulate) {
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    }
    return;
  }
  hold_onednn_to_this_thread();
  const dnnl_status_t status = dnnl_sgemm(a.transposed ? 'T' : 'N', b.transposed ? 'T' : 'N', m, n, k, 1.0f, a.data, a.ld,
                                          b.data, b.ld, accumulate ? 1.0f : 0.0f, c, ldc);
  if (status != dnnl_success) {
    throw std::runtime_error("oneDNN's sgemm failed (status " + std::to_string(static_cast<int>(status)) + ") on a " +
                             std::to_string(m) + "x" + std::to_string(k) + " by " + std::to_string(k) + "x" +
                             std::to_string(n) + " product");
  }
}

}  // namespace keel::ops::detail
