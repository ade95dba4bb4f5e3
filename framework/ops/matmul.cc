// matmul: (N, K) x (K, M) -> (N, M) through Eigen's GEMM.
#include "framework/autodiff/tape.h"
#include "framework/ops/op_util.h"
#include "framework/ops/ops.h"

namespace keel::ops {

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (a.rank() != 2 || b.rank() != 2 || a.dim(1) != b.dim(0)) {
    detail::shape_error("matmul", "cannot multiply " + shape_string(a.shape()) + " by " + shape_string(b.shape()));
  }
  Tensor y = Tensor::empty({a.dim(0), b.dim(1)});
  detail::count_forward_flops(2 * a.dim(0) * a.dim(1) * b.dim(1));
  if (detail::compute(y, {&a, &b})) y.matrix().noalias() = a.matrix() * b.matrix();
  if (GradientTape::is_recording({&a, &b})) {
    GradientTape::record({a, b}, {y}, [a, b](const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
      std::vector<Tensor> grads(2);
      if (needs[0]) {  // da = dy · bᵀ   (N, K)
        grads[0] = detail::grad_buffer(a);
        if (detail::compute(grads[0], {&dy[0]})) grads[0].matrix().noalias() = dy[0].matrix() * b.matrix().transpose();
      }
      if (needs[1]) {  // db = aᵀ · dy   (K, M)
        grads[1] = detail::grad_buffer(b);
        if (detail::compute(grads[1], {&dy[0]})) grads[1].matrix().noalias() = a.matrix().transpose() * dy[0].matrix();
      }
      return grads;
    });
  }
  return y;
}

}  // namespace keel::ops
