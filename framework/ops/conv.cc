// conv2d (im2col + one Eigen GEMM per chunk of output pixels) and zero_pad2d, NHWC.
#include "framework/ops/conv.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "framework/autodiff/tape.h"
#include "framework/device/context.h"
#include "framework/ops/op_util.h"

namespace keel::ops {

WindowAxis window_axis(const std::string& op, int64_t input, int64_t kernel, int64_t stride, int64_t dilation,
                       Padding padding) {
  if (kernel < 1 || stride < 1 || dilation < 1) {
    detail::shape_error(op, "window size, stride and dilation must be >= 1 (got window " + std::to_string(kernel) +
                                ", stride " + std::to_string(stride) + ", dilation " + std::to_string(dilation) + ")");
  }
  WindowAxis a;
  a.input = input;
  a.kernel = kernel;
  a.stride = stride;
  a.dilation = dilation;
  const int64_t eff = a.effective_kernel();
  if (input < 0) {  // unknown (shape rules only)
    a.output = -1;
    return a;
  }
  if (padding == Padding::valid) {
    if (input < eff) {
      detail::shape_error(op, "VALID padding needs the input (" + std::to_string(input) +
                                  ") to be at least the window's extent (" + std::to_string(eff) + ")");
    }
    a.output = (input - eff) / stride + 1;
  } else {
    a.output = (input + stride - 1) / stride;
    const int64_t total = std::max<int64_t>((a.output - 1) * stride + eff - input, 0);
    a.pad_before = total / 2;
    a.pad_after = total - a.pad_before;
  }
  return a;
}

namespace {

// Largest im2col chunk, in floats (4 MB). Small enough that a chunk written by im2col is still in
// cache when the GEMM reads it, and that the workspace stays small next to the activations; large
// enough (thousands of rows for typical patches) that each GEMM runs at full speed. Measured on 3x3
// convs of 32-64 channels: 2^18 and 2^20 run at the same speed, 2^23 is 25-30% slower.
constexpr int64_t kChunkFloats = int64_t{1} << 20;

struct ConvGeometry {
  int64_t batch = 0, in_channels = 0, out_channels = 0;
  WindowAxis h, w;

  int64_t rows() const { return batch * h.output * w.output; }           // output pixels
  int64_t patch() const { return h.kernel * w.kernel * in_channels; }  // im2col columns
  // A 1x1 stride-1 convolution is a GEMM on x viewed as (N*H*W, Cin): no padding, no im2col.
  bool pointwise() const { return h.kernel == 1 && w.kernel == 1 && h.stride == 1 && w.stride == 1; }
  int64_t chunk_rows() const {
    return std::clamp<int64_t>(kChunkFloats / std::max<int64_t>(patch(), 1), 1, std::max<int64_t>(rows(), 1));
  }
};

ConvGeometry conv_geometry(const Shape& x, const Shape& kernel, std::array<int, 2> strides, Padding padding,
                           std::array<int, 2> dilation) {
  if (x.size() != 4) detail::shape_error("conv2d", "input must be NHWC (rank 4), got " + shape_string(x));
  if (kernel.size() != 4) {
    detail::shape_error("conv2d", "kernel must be (KH, KW, Cin, Cout) (rank 4), got " + shape_string(kernel));
  }
  if (x[3] != kernel[2]) {
    detail::shape_error("conv2d", "input " + shape_string(x) + " has " + std::to_string(x[3]) + " channels but kernel " +
                                      shape_string(kernel) + " expects " + std::to_string(kernel[2]));
  }
  ConvGeometry g;
  g.batch = x[0];
  g.in_channels = x[3];
  g.out_channels = kernel[3];
  g.h = window_axis("conv2d", x[1], kernel[0], strides[0], dilation[0], padding);
  g.w = window_axis("conv2d", x[2], kernel[1], strides[1], dilation[1], padding);
  return g;
}

// Walks output pixels row0, row0 + 1, ... as (image, oh, ow) without a division per pixel.
struct PixelCursor {
  const ConvGeometry& g;
  int64_t n, oh, ow;
  PixelCursor(const ConvGeometry& geometry, int64_t row) : g(geometry) {
    const int64_t per_image = g.h.output * g.w.output;
    n = row / per_image;
    oh = (row % per_image) / g.w.output;
    ow = row % g.w.output;
  }
  void next() {
    if (++ow == g.w.output) {
      ow = 0;
      if (++oh == g.h.output) {
        oh = 0;
        ++n;
      }
    }
  }
  int64_t top() const { return oh * g.h.stride - g.h.pad_before; }   // input row of tap a = 0
  int64_t left() const { return ow * g.w.stride - g.w.pad_before; }  // input column of tap b = 0
};

// First and one-past-last tap b whose column left + b * dilation lies in [0, width).
inline std::pair<int64_t, int64_t> valid_taps(int64_t left, int64_t taps, int64_t dilation, int64_t width) {
  const int64_t lo = left >= 0 ? 0 : (-left + dilation - 1) / dilation;
  const int64_t hi = left >= width ? 0 : std::min(taps, (width - left + dilation - 1) / dilation);
  return {std::min(lo, hi), hi};
}

// cols (count, KH*KW*Cin) = rows [row0, row0 + count) of the im2col matrix of x (N, H, W, Cin); each
// row is the patch under one output pixel in (a, b, c) order, matching the kernel viewed as
// (KH*KW*Cin, Cout). Taps in the padding are 0.
void im2col(const float* x, const ConvGeometry& g, int64_t row0, int64_t count, float* cols) {
  const int64_t H = g.h.input, W = g.w.input, C = g.in_channels, KH = g.h.kernel, KW = g.w.kernel;
  const int64_t dh = g.h.dilation, dw = g.w.dilation, patch = g.patch(), tap_row = KW * C;
  PixelCursor p(g, row0);
  for (int64_t r = 0; r < count; ++r, p.next()) {
    float* dst = cols + r * patch;
    const float* image = x + p.n * H * W * C;
    const int64_t top = p.top(), left = p.left();
    const auto [b_lo, b_hi] = valid_taps(left, KW, dw, W);
    for (int64_t a = 0; a < KH; ++a) {
      float* d = dst + a * tap_row;
      const int64_t ih = top + a * dh;
      if (ih < 0 || ih >= H || b_lo == b_hi) {
        std::memset(d, 0, static_cast<size_t>(tap_row) * sizeof(float));
        continue;
      }
      const float* src = image + ih * W * C;
      std::memset(d, 0, static_cast<size_t>(b_lo * C) * sizeof(float));
      if (dw == 1) {  // the taps in range are one contiguous run of the input row
        std::memcpy(d + b_lo * C, src + (left + b_lo) * C, static_cast<size_t>((b_hi - b_lo) * C) * sizeof(float));
      } else {
        for (int64_t b = b_lo; b < b_hi; ++b) {
          std::memcpy(d + b * C, src + (left + b * dw) * C, static_cast<size_t>(C) * sizeof(float));
        }
      }
      std::memset(d + b_hi * C, 0, static_cast<size_t>((KW - b_hi) * C) * sizeof(float));
    }
  }
}

// The adjoint of im2col: dx (N, H, W, Cin) += the patches in dcols (count, KH*KW*Cin) for rows
// [row0, row0 + count); taps in the padding are dropped.
void col2im_add(const float* dcols, const ConvGeometry& g, int64_t row0, int64_t count, float* dx) {
  const int64_t H = g.h.input, W = g.w.input, C = g.in_channels, KH = g.h.kernel, KW = g.w.kernel;
  const int64_t dh = g.h.dilation, dw = g.w.dilation, patch = g.patch(), tap_row = KW * C;
  PixelCursor p(g, row0);
  for (int64_t r = 0; r < count; ++r, p.next()) {
    const float* src = dcols + r * patch;
    float* image = dx + p.n * H * W * C;
    const int64_t top = p.top(), left = p.left();
    const auto [b_lo, b_hi] = valid_taps(left, KW, dw, W);
    for (int64_t a = 0; a < KH; ++a) {
      const int64_t ih = top + a * dh;
      if (ih < 0 || ih >= H) continue;
      const float* s = src + a * tap_row;
      float* d = image + ih * W * C;
      if (dw == 1) {  // one contiguous run of the input row
        float* __restrict__ db = d + (left + b_lo) * C;
        const float* __restrict__ sb = s + b_lo * C;
        for (int64_t i = 0; i < (b_hi - b_lo) * C; ++i) db[i] += sb[i];
      } else {
        for (int64_t b = b_lo; b < b_hi; ++b) {
          float* __restrict__ db = d + (left + b * dw) * C;
          const float* __restrict__ sb = s + b * C;
          for (int64_t c = 0; c < C; ++c) db[c] += sb[c];
        }
      }
    }
  }
}

// The im2col buffer (chunk_rows, KH*KW*Cin), charged as workspace to the current owner. Allocated
// on abstract runs too, so the plan sees the same charges.
Tensor cols_workspace(const ConvGeometry& g) {
  CategoryScope workspace(Category::workspace);
  return Tensor::empty({g.chunk_rows(), g.patch()});
}

}  // namespace

Shape conv2d_output_shape(const Shape& x, const Shape& kernel, std::array<int, 2> strides, Padding padding,
                          std::array<int, 2> dilation) {
  const ConvGeometry g = conv_geometry(x, kernel, strides, padding, dilation);
  return {g.batch, g.h.output, g.w.output, g.out_channels};
}

Tensor conv2d(const Tensor& x, const Tensor& kernel, std::array<int, 2> strides, Padding padding,
              std::array<int, 2> dilation) {
  if (!x.defined() || !kernel.defined()) detail::shape_error("conv2d", "undefined input or kernel");
  const ConvGeometry g = conv_geometry(x.shape(), kernel.shape(), strides, padding, dilation);
  const int64_t rows = g.rows(), patch = g.patch(), cout = g.out_channels;
  Tensor y = Tensor::empty({g.batch, g.h.output, g.w.output, cout});
  detail::count_forward_flops(2 * rows * patch * cout);
  const bool real = detail::compute(y, {&x, &kernel});
  if (rows > 0 && cout > 0) {
    if (patch == 0) {
      y.fill(0.0f);
    } else if (g.pointwise()) {
      if (real) {
        MatrixMap(y.data(), rows, cout).noalias() =
            ConstMatrixMap(x.data(), rows, patch) * ConstMatrixMap(kernel.data(), patch, cout);
      }
    } else {
      Tensor cols = cols_workspace(g);
      const int64_t chunk = g.chunk_rows();
      if (real) {
        const ConstMatrixMap k(kernel.data(), patch, cout);
        for (int64_t row0 = 0; row0 < rows; row0 += chunk) {
          const int64_t n = std::min(chunk, rows - row0);
          im2col(x.data(), g, row0, n, cols.data());
          MatrixMap(y.data() + row0 * cout, n, cout).noalias() = ConstMatrixMap(cols.data(), n, patch) * k;
        }
      }
    }  // the workspace is released here, before anything else is allocated
  }
  if (GradientTape::is_recording({&x, &kernel})) {
    GradientTape::record({x, kernel}, {y}, [x, kernel, g](const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
      const int64_t rows = g.rows(), patch = g.patch(), cout = g.out_channels;
      std::vector<Tensor> grads(2);
      if (needs[0]) grads[0] = detail::grad_buffer(x);       // dx      (N, H, W, Cin)
      if (needs[1]) grads[1] = detail::grad_buffer(kernel);  // dkernel (KH, KW, Cin, Cout)
      const bool real_dx = needs[0] && detail::compute(grads[0], {&dy[0], &x, &kernel});
      const bool real_dk = needs[1] && detail::compute(grads[1], {&dy[0], &x, &kernel});
      if (rows == 0 || cout == 0 || patch == 0) {  // nothing flows: zero gradients
        if (real_dx) grads[0].fill(0.0f);
        if (real_dk) grads[1].fill(0.0f);
        return grads;
      }
      if (g.pointwise()) {  // dx = dy · kernelᵀ, dkernel = xᵀ · dy with x viewed as (N*H*W, Cin)
        const float* dyd = dy[0].data();
        if (real_dx) {
          MatrixMap(grads[0].data(), rows, patch).noalias() =
              ConstMatrixMap(dyd, rows, cout) * ConstMatrixMap(kernel.data(), patch, cout).transpose();
        }
        if (real_dk) {
          MatrixMap(grads[1].data(), patch, cout).noalias() =
              ConstMatrixMap(x.data(), rows, patch).transpose() * ConstMatrixMap(dyd, rows, cout);
        }
        return grads;
      }
      // One workspace buffer per chunk: first the im2col of x (for dkernel), then dy · kernelᵀ (for dx).
      Tensor cols = cols_workspace(g);
      if (!real_dx && !real_dk) return grads;
      if (real_dx) grads[0].fill(0.0f);  // col2im adds
      if (real_dk) grads[1].fill(0.0f);  // chunks add
      const ConstMatrixMap k(kernel.data(), patch, cout);
      const int64_t chunk = g.chunk_rows();
      for (int64_t row0 = 0; row0 < rows; row0 += chunk) {
        const int64_t n = std::min(chunk, rows - row0);
        const ConstMatrixMap dym(dy[0].data() + row0 * cout, n, cout);
        MatrixMap c(cols.data(), n, patch);
        if (real_dk) {
          im2col(x.data(), g, row0, n, cols.data());
          MatrixMap(grads[1].data(), patch, cout).noalias() += c.transpose() * dym;
        }
        if (real_dx) {
          c.noalias() = dym * k.transpose();
          col2im_add(cols.data(), g, row0, n, grads[0].data());
        }
      }
      return grads;
    });
  }
  return y;
}

Shape zero_pad2d_output_shape(const Shape& x, std::array<int, 4> pads) {
  if (x.size() != 4) detail::shape_error("zero_pad2d", "input must be NHWC (rank 4), got " + shape_string(x));
  for (int p : pads) {
    if (p < 0) detail::shape_error("zero_pad2d", "pads {top, bottom, left, right} must be >= 0, got " + std::to_string(p));
  }
  return {x[0], x[1] < 0 ? -1 : x[1] + pads[0] + pads[1], x[2] < 0 ? -1 : x[2] + pads[2] + pads[3], x[3]};
}

Tensor zero_pad2d(const Tensor& x, std::array<int, 4> pads) {
  const Shape out_shape = zero_pad2d_output_shape(x.shape(), pads);
  Tensor y = Tensor::empty(out_shape);
  const int64_t N = x.dim(0), H = x.dim(1), W = x.dim(2), C = x.dim(3);
  const int64_t OH = out_shape[1], OW = out_shape[2], top = pads[0], left = pads[2];
  if (detail::compute(y, {&x}) && y.size() > 0) {
    const float* src = x.data();
    float* dst = y.data();
    const size_t row_bytes = static_cast<size_t>(W * C) * sizeof(float);
    for (int64_t n = 0; n < N; ++n) {
      float* image = dst + n * OH * OW * C;
      std::memset(image, 0, static_cast<size_t>(top * OW * C) * sizeof(float));
      for (int64_t h = 0; h < H; ++h) {
        float* row = image + (top + h) * OW * C;
        std::memset(row, 0, static_cast<size_t>(left * C) * sizeof(float));
        if (row_bytes > 0) std::memcpy(row + left * C, src + (n * H + h) * W * C, row_bytes);
        std::memset(row + (left + W) * C, 0, static_cast<size_t>((OW - left - W) * C) * sizeof(float));
      }
      std::memset(image + (top + H) * OW * C, 0, static_cast<size_t>((OH - top - H) * OW * C) * sizeof(float));
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
