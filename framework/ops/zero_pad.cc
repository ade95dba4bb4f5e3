// zero_pad2d (conv.h): NHWC images placed in zeros, in the compute dtype; backward crops dy.
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "framework/autodiff/tape.h"
#include "framework/ops/conv.h"
#include "framework/ops/op_util.h"

namespace keel::ops {
namespace {

// dst (N, OH, OW, C) = src (N, H, W, C) placed at (top, left), zeros around it.
template <typename T>
void pad_images(const T* src, int64_t N, int64_t H, int64_t W, int64_t C, int64_t OH, int64_t OW, int64_t top,
                int64_t left, T* dst) {
  const size_t row_bytes = static_cast<size_t>(W * C) * sizeof(T);
  for (int64_t n = 0; n < N; ++n) {
    T* image = dst + n * OH * OW * C;
    std::memset(image, 0, static_cast<size_t>(top * OW * C) * sizeof(T));
    for (int64_t h = 0; h < H; ++h) {
      T* row = image + (top + h) * OW * C;
      std::memset(row, 0, static_cast<size_t>(left * C) * sizeof(T));
      if (row_bytes > 0) std::memcpy(row + left * C, src + (n * H + h) * W * C, row_bytes);
      std::memset(row + (left + W) * C, 0, static_cast<size_t>((OW - left - W) * C) * sizeof(T));
    }
    std::memset(image + (top + H) * OW * C, 0, static_cast<size_t>((OH - top - H) * OW * C) * sizeof(T));
  }
}

}  // namespace

Shape zero_pad2d_output_shape(const Shape& x, std::array<int, 4> pads) {
  if (x.size() != 4) detail::shape_error("zero_pad2d", "input must be NHWC (rank 4), got " + shape_string(x));
  for (int p : pads) {
    if (p < 0) detail::shape_error("zero_pad2d", "pads {top, bottom, left, right} must be >= 0, got " + std::to_string(p));
  }
  return {x[0], x[1] < 0 ? -1 : x[1] + pads[0] + pads[1], x[2] < 0 ? -1 : x[2] + pads[2] + pads[3], x[3]};
}

Tensor zero_pad2d(const Tensor& x, std::array<int, 4> pads) {
  const Shape out_shape = zero_pad2d_output_shape(x.shape(), pads);
  // Pads in the compute dtype (a bfloat16 input stays bfloat16: zeros and copies are exact).
  const DType dt = compute_dtype();
  const Tensor xin = dt == DType::float32 ? detail::operand(x, dt).value : x.to(dt);
  Tensor y = Tensor::empty(out_shape, dt);
  const int64_t N = x.dim(0), H = x.dim(1), W = x.dim(2), C = x.dim(3);
  const int64_t OH = out_shape[1], OW = out_shape[2], top = pads[0], left = pads[2];
  if (detail::compute(y, {&xin}) && y.size() > 0) {
    if (dt == DType::bfloat16) {
      pad_images(xin.bfloat16_data(), N, H, W, C, OH, OW, top, left, y.bfloat16_data());
    } else {
      pad_images(xin.data(), N, H, W, C, OH, OW, top, left, y.data());
    }
  }
  if (GradientTape::is_recording({&x})) {
    const Shape in_shape = x.shape();
    const bool is_variable = x.is_trainable_variable();
    GradientTape::record({x}, {y}, [in_shape, is_variable, top, left](const std::vector<Tensor>& dy,
                                                                      const std::vector<bool>&) {
      // dx = dy cropped to the input's window.
      Tensor dx = detail::grad_buffer(in_shape, is_variable);
      const int64_t N = in_shape[0], H = in_shape[1], W = in_shape[2], C = in_shape[3];
      const int64_t OH = dy[0].dim(1), OW = dy[0].dim(2);
      if (detail::compute(dx, {&dy[0]}) && dx.size() > 0) {
        const size_t row_bytes = static_cast<size_t>(W * C) * sizeof(float);
        for (int64_t n = 0; n < N; ++n) {
          for (int64_t h = 0; h < H; ++h) {
            std::memcpy(dx.data() + (n * H + h) * W * C, dy[0].data() + ((n * OH + top + h) * OW + left) * C, row_bytes);
          }
        }
      }
      return std::vector<Tensor>{dx};
    });
  }
  return y;
}

}  // namespace keel::ops
