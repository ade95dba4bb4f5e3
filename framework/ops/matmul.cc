// matmul: (N, K) x (K, M) -> (N, M) through oneDNN's sgemm (ops/gemm.h), on the replica's share of the
// threads; a replicated layer's kernel gradient through keel's chained products
// (ops/replicated_kernel_gradient.h); in a host program, each replica's rows alone (ops/host_program.h).
#include <stdexcept>
#include <vector>

#include "framework/autodiff/tape.h"
#include "framework/ops/gemm.h"
#include "framework/ops/host_program.h"
#include "framework/ops/op_util.h"
#include "framework/ops/ops.h"
#include "framework/ops/replicated_kernel_gradient.h"

namespace keel::ops {

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (a.rank() != 2 || b.rank() != 2 || a.dim(1) != b.dim(0)) {
    detail::shape_error("matmul", "cannot multiply " + shape_string(a.shape()) + " by " + shape_string(b.shape()));
  }
  const DType dt = compute_dtype();
  const detail::Operand ao = detail::operand(a, dt), bo = detail::operand(b, dt);
  Tensor y = detail::output_buffer({a.dim(0), b.dim(1)}, dt);
  // In a host program (framework/device/replica_rows.h), each replica's rows with its own product's bits.
  const ReplicaRows* rows = detail::rows_of(a);
  if (rows != nullptr) {
    detail::count_forward_flops_by_rows(2 * a.dim(1) * b.dim(1), *rows);
  } else {
    detail::count_forward_flops(2 * a.dim(0) * a.dim(1) * b.dim(1));
  }
  if (detail::compute(y, {&ao.value, &bo.value})) {
    if (rows != nullptr) {
      detail::replica_products(y, ao.value, bo.value, /*transpose_b=*/false, *rows);
    } else {
      detail::gemm(y.matrix(), ao.value.matrix(), bo.value.matrix());
    }
  }
  y = detail::finish(y, dt);
  if (GradientTape::is_recording({&a, &b})) {
    const bool a_is_variable = a.is_trainable_variable(), b_is_variable = b.is_trainable_variable();
    const uint64_t b_placement = detail::placement_key(b);
    GradientTape::record({a, b}, {y}, [a = ao.kept, b = bo.kept, dt, a_is_variable, b_is_variable, b_placement](
                                          const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
      std::vector<Tensor> grads(2);
      if (needs[0]) {  // da = dy · bᵀ   (N, K)
        grads[0] = detail::grad_buffer(a.shape(), a_is_variable);
        const Tensor bv = detail::compute_values(b, dt);
        if (detail::compute(grads[0], {&dy[0]})) {
          if (const ReplicaRows* rows = detail::rows_of(dy[0])) {
            detail::replica_products(grads[0], dy[0], bv, /*transpose_b=*/true, *rows);
          } else {
            detail::gemm(grads[0].matrix(), dy[0].matrix(), bv.matrix().transpose());
          }
        }
      }
      if (needs[1]) {  // db = aᵀ · dy   (K, M)
        grads[1] = detail::grad_buffer(b.shape(), b_is_variable, b_placement);
        const Tensor av = detail::compute_values(a, dt);
        if (!detail::compute(grads[1], {&dy[0]})) return grads;
        if (const ReplicaRows* rows = detail::rows_of(dy[0])) {  // a host program: the replicas' mean
          if (dt != DType::float32 || !b_is_variable) throw std::logic_error("matmul: a host program's kernel must be a float32 variable");
          detail::replica_mean_kernel_gradient(grads[1], av, dy[0], *rows);
          return grads;
        }
        if (dt != DType::float32 || !b_is_variable || !detail::replicated_kernel_gradient(grads[1], av, dy[0])) {
          detail::gemm(grads[1].matrix(), av.matrix().transpose(), dy[0].matrix());
        }
      }
      return grads;
    });
  }
  return y;
}

}  // namespace keel::ops
