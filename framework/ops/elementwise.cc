// Elementwise ops and reshapes: bias_add, add, scale, reshape.
#include "framework/autodiff/tape.h"
#include "framework/ops/host_program.h"
#include "framework/ops/op_util.h"
#include "framework/ops/ops.h"

namespace keel::ops {
namespace {

// y = x + b on one row of bfloat16 values (b: the bias's rounded values): a loop the compiler
// vectorises, the bits of widening, adding in float32 and rounding to nearest even.
void add_bias_row(const uint16_t* __restrict x, const float* __restrict b, uint16_t* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) detail::store(y, i, detail::load(x, i) + b[i]);
}

}  // namespace

Tensor bias_add(const Tensor& x, const Tensor& bias) {
  if (bias.rank() != 1 || x.rank() < 1 || x.dim(-1) != bias.dim(0)) {
    detail::shape_error("bias_add", "bias " + shape_string(bias.shape()) + " does not match input " +
                                        shape_string(x.shape()));
  }
  const int64_t channels = bias.dim(0);
  const DType dt = compute_dtype();
  Tensor y;
  if (dt == DType::bfloat16 && x.dtype() == DType::bfloat16) {  // bfloat16 to bfloat16 with no temporary
    const Tensor bv = detail::operand(bias, dt).value;
    y = Tensor::empty(x.shape(), dt);
    if (detail::compute(y, {&x, &bv}) && channels > 0) {
      const uint16_t* xd = x.bfloat16_data();
      uint16_t* yd = y.bfloat16_data();
      const float* b = bv.data();
      detail::for_row_blocks(x.size() / channels, channels, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) add_bias_row(xd + r * channels, b, yd + r * channels, channels);
      });
    }
  } else {
    const Tensor xv = detail::operand(x, dt).value, bv = detail::operand(bias, dt).value;
    y = detail::output_buffer(x.shape(), dt);
    if (detail::compute(y, {&xv, &bv}) && channels > 0) {
      // Rows of C channels: works for (N, C) and NHWC alike.
      const Eigen::Map<const Eigen::RowVectorXf> b(bv.data(), channels);
      detail::for_row_blocks(x.size() / channels, channels, [&](int64_t r0, int64_t r1) {
        MatrixMap(y.data() + r0 * channels, r1 - r0, channels).noalias() =
            ConstMatrixMap(xv.data() + r0 * channels, r1 - r0, channels).rowwise() + b;
      });
    }
    y = detail::finish(y, dt);
  }
  if (GradientTape::is_recording({&x, &bias})) {
    const Shape bias_shape = bias.shape();
    const bool bias_is_variable = bias.is_trainable_variable();
    const uint64_t bias_placement = detail::placement_key(bias);
    GradientTape::record({x, bias}, {y}, [bias_shape, bias_is_variable, bias_placement](const std::vector<Tensor>& dy,
                                                                                       const std::vector<bool>& needs) {
      std::vector<Tensor> grads(2);
      if (needs[0]) grads[0] = dy[0];
      if (needs[1]) {
        const int64_t channels = bias_shape[0];
        grads[1] = detail::grad_buffer(bias_shape, bias_is_variable, bias_placement);
        if (detail::compute(grads[1], {&dy[0]}) && channels > 0) {
          const ReplicaRows* rows = detail::rows_of(dy[0]);
          if (rows != nullptr && bias_is_variable) {  // a host program: the replicas' mean
            detail::replica_mean_column_sums(dy[0], grads[1].data(), *rows);
          } else {
            detail::parallel_column_sums(dy[0].data(), dy[0].size() / channels, channels, grads[1].data());
          }
        }
      }
      return grads;
    });
  }
  return y;
}

Tensor add(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) {
    detail::shape_error("add", "shapes differ: " + shape_string(a.shape()) + " and " + shape_string(b.shape()));
  }
  const DType dt = compute_dtype();
  Tensor y;
  if (dt == DType::bfloat16 && a.dtype() == DType::bfloat16 && b.dtype() == DType::bfloat16) {
    y = Tensor::empty(a.shape(), dt);  // bfloat16 to bfloat16 with no temporary: one float32 add each
    if (detail::compute(y, {&a, &b})) {
      const uint16_t *ad = a.bfloat16_data(), *bd = b.bfloat16_data();
      uint16_t* yd = y.bfloat16_data();
      const int64_t n = a.size();
      detail::for_element_blocks(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) detail::store(yd, i, detail::load(ad, i) + detail::load(bd, i));
      });
    }
  } else {
    const Tensor av = detail::operand(a, dt).value, bv = detail::operand(b, dt).value;
    y = detail::output_buffer(a.shape(), dt);
    if (detail::compute(y, {&av, &bv})) {
      detail::for_element_blocks(y.size(), [&](int64_t b, int64_t e) {
        y.array().segment(b, e - b) = av.array().segment(b, e - b) + bv.array().segment(b, e - b);
      });
    }
    y = detail::finish(y, dt);
  }
  if (GradientTape::is_recording({&a, &b})) {
    GradientTape::record({a, b}, {y}, [](const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
      return std::vector<Tensor>{needs[0] ? dy[0] : Tensor(), needs[1] ? dy[0] : Tensor()};
    });
  }
  return y;
}

Tensor scale(const Tensor& x, float factor) {
  const DType dt = compute_dtype();
  const Tensor xv = detail::operand(x, dt).value;
  Tensor y = detail::output_buffer(x.shape(), dt);
  if (detail::compute(y, {&xv})) y.array() = xv.array() * factor;
  y = detail::finish(y, dt);
  if (GradientTape::is_recording({&x})) {
    GradientTape::record({x}, {y}, [factor](const std::vector<Tensor>& dy, const std::vector<bool>&) {
      Tensor dx = Tensor::empty(dy[0].shape());
      if (detail::compute(dx, {&dy[0]})) dx.array() = dy[0].array() * factor;
      return std::vector<Tensor>{dx};
    });
  }
  return y;
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  Tensor y = x.reshape(shape);
  if (GradientTape::is_recording({&x})) {
    const Shape in_shape = x.shape();
    GradientTape::record({x}, {y}, [in_shape](const std::vector<Tensor>& dy, const std::vector<bool>&) {
      return std::vector<Tensor>{dy[0].reshape(in_shape)};
    });
  }
  return y;
}

}  // namespace keel::ops
