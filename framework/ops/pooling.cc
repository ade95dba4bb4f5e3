// max_pool2d, avg_pool2d and global_avg_pool2d on NHWC images. Every inner loop runs over the C
// contiguous channels of one pixel.
#include "framework/ops/pooling.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "framework/autodiff/tape.h"
#include "framework/ops/op_util.h"

namespace keel::ops {
namespace {

struct PoolGeometry {
  int64_t batch = 0, channels = 0;
  WindowAxis h, w;
};

PoolGeometry pool_geometry(const std::string& op, const Shape& x, std::array<int, 2> pool, std::array<int, 2> strides,
                           Padding padding) {
  if (x.size() != 4) detail::shape_error(op, "input must be NHWC (rank 4), got " + shape_string(x));
  PoolGeometry g;
  g.batch = x[0];
  g.channels = x[3];
  g.h = window_axis(op, x[1], pool[0], strides[0], 1, padding);
  g.w = window_axis(op, x[2], pool[1], strides[1], 1, padding);
  return g;
}

// The in-input part of the window of output (oh, ow): rows [h_lo, h_hi) x columns [w_lo, w_hi).
// Never empty: SAME pads less than a window on each side.
struct WindowRange {
  int64_t h_lo, h_hi, w_lo, w_hi;
  int64_t count() const { return (h_hi - h_lo) * (w_hi - w_lo); }
};

inline WindowRange window_range(const PoolGeometry& g, int64_t oh, int64_t ow) {
  const int64_t top = oh * g.h.stride - g.h.pad_before, left = ow * g.w.stride - g.w.pad_before;
  return {std::max<int64_t>(top, 0), std::min(top + g.h.kernel, g.h.input), std::max<int64_t>(left, 0),
          std::min(left + g.w.kernel, g.w.input)};
}

// Calls f(window, output pixel index n*OH*OW + oh*OW + ow, image index n) for every output pixel,
// image by image on the replica's share of the threads: f must touch only image n's data (each
// image's windows still run in order, so sums within an image keep their order).
template <typename F>
void for_each_window(const PoolGeometry& g, F&& f) {
  const int64_t per_image = g.h.output * g.w.output;
  const double work = static_cast<double>(g.batch * per_image) * static_cast<double>(g.channels) *
                      static_cast<double>(g.h.kernel * g.w.kernel);
  parallel_for(
      g.batch,
      [&](int64_t n) {
        int64_t out = n * per_image;
        for (int64_t oh = 0; oh < g.h.output; ++oh) {
          for (int64_t ow = 0; ow < g.w.output; ++ow, ++out) f(window_range(g, oh, ow), out, n);
        }
      },
      threads_worth(work, kMinElementsPerThread));
}

// `k` as a window offset of type W (float, or bfloat16's bits: exact up to 256).
template <typename W>
W window_offset(float k) {
  W w;
  detail::store(&w, 0, k);
  return w;
}

// y (N, OH, OW, C) = the maximum of each window of x (N, H, W, C), both float32 or both bfloat16's
// bits (a maximum is one of its inputs: copied, not rounded); with `where` (the shape of y), also
// the offset of each maximum in its window, as max_pool2d's backward reads it.
template <typename T, typename W>
void max_pool_forward(const PoolGeometry& g, const T* xd, T* yd, W* wd) {
  const int64_t C = g.channels, H = g.h.input, W_ = g.w.input;
  for_each_window(g, [&](const WindowRange& r, int64_t out, int64_t n) {
    T* __restrict__ o = yd + out * C;
    const T* image = xd + n * H * W_ * C;
    std::memcpy(o, image + (r.h_lo * W_ + r.w_lo) * C, static_cast<size_t>(C) * sizeof(T));
    if (wd == nullptr) {
      for (int64_t h = r.h_lo; h < r.h_hi; ++h) {
        for (int64_t w = r.w_lo; w < r.w_hi; ++w) {
          const T* __restrict__ s = image + (h * W_ + w) * C;
          for (int64_t c = 0; c < C; ++c) o[c] = detail::load(s, c) > detail::load(o, c) ? s[c] : o[c];
        }
      }
      return;
    }
    W* __restrict__ wo = wd + out * C;
    std::fill(wo, wo + C, window_offset<W>(0.0f));
    float k = 0.0f;
    for (int64_t h = r.h_lo; h < r.h_hi; ++h) {
      for (int64_t w = r.w_lo; w < r.w_hi; ++w, k += 1.0f) {
        const T* __restrict__ s = image + (h * W_ + w) * C;
        const W kw = window_offset<W>(k);
        for (int64_t c = 0; c < C; ++c) {
          const bool greater = detail::load(s, c) > detail::load(o, c);  // strict: ties keep the first max, as TensorFlow
          o[c] = greater ? s[c] : o[c];
          wo[c] = greater ? kw : wo[c];
        }
      }
    }
  });
}

// dx (N, H, W, C) += dy (N, OH, OW, C) routed to where each maximum came from.
template <typename W>
void max_pool_backward(const PoolGeometry& g, const W* wd, const float* dyd, float* dxd) {
  const int64_t C = g.channels, H = g.h.input, W_ = g.w.input;
  for_each_window(g, [&](const WindowRange& r, int64_t out, int64_t n) {
    const int64_t width = r.w_hi - r.w_lo;
    float* dimage = dxd + n * H * W_ * C;
    const W* w_out = wd + out * C;
    const float* g_out = dyd + out * C;
    for (int64_t c = 0; c < C; ++c) {
      const int64_t k = static_cast<int64_t>(detail::load(w_out, c));
      dimage[((r.h_lo + k / width) * W_ + r.w_lo + k % width) * C + c] += g_out[c];
    }
  });
}

// max_pool_forward on x as it comes: bfloat16 x into a bfloat16 y directly under bfloat16 (no
// float32 copies), else its compute values into a float32 buffer rounded by finish(). y and where
// (when recording; of `where_dtype`) come back as the op's results.
void max_pool_compute(const PoolGeometry& g, const Tensor& x, DType dt, DType where_dtype, bool recording, Tensor& y,
                      Tensor& where) {
  const Shape y_shape = {g.batch, g.h.output, g.w.output, g.channels};
  if (dt == DType::bfloat16 && x.dtype() == DType::bfloat16) {
    y = Tensor::empty(y_shape, dt);
    where = recording ? Tensor::empty(y_shape, where_dtype) : Tensor();
    if (!detail::compute(y, {&x}) || y.size() == 0) return;
    if (!recording) {
      max_pool_forward<uint16_t, uint16_t>(g, x.bfloat16_data(), y.bfloat16_data(), nullptr);
    } else if (where_dtype == DType::bfloat16) {
      max_pool_forward(g, x.bfloat16_data(), y.bfloat16_data(), where.bfloat16_data());
    } else {
      max_pool_forward(g, x.bfloat16_data(), y.bfloat16_data(), where.data());
    }
    return;
  }
  const Tensor xv = detail::operand(x, dt).value;
  y = detail::output_buffer(y_shape, dt);
  where = recording ? detail::output_buffer(y_shape, where_dtype) : Tensor();
  if (detail::compute(y, {&xv}) && y.size() > 0) max_pool_forward(g, xv.data(), y.data(), recording ? where.data() : nullptr);
  y = detail::finish(y, dt);
  if (recording) where = detail::finish(where, where_dtype);
}

}  // namespace

Shape pool2d_output_shape(const Shape& x, std::array<int, 2> pool, std::array<int, 2> strides, Padding padding) {
  const PoolGeometry g = pool_geometry("pool2d", x, pool, strides, padding);
  return {g.batch, g.h.output, g.w.output, g.channels};
}

Tensor max_pool2d(const Tensor& x, std::array<int, 2> pool, std::array<int, 2> strides, Padding padding) {
  const PoolGeometry g = pool_geometry("max_pool2d", x.shape(), pool, strides, padding);
  const int64_t H = g.h.input, W = g.w.input;
  if (H * W > std::numeric_limits<int32_t>::max()) detail::shape_error("max_pool2d", "image too large: " + shape_string(x.shape()));
  const bool recording = GradientTape::is_recording({&x});
  const DType dt = compute_dtype();
  // Backward needs only where each maximum came from: its offset in the window (row-major over the
  // window's in-input part), stored as a float (exact: windows are far below 2^24 elements; under
  // bfloat16, as a bfloat16 when the window has at most 256 elements, all exact). It is the size of
  // y, where saving x would keep the (often padded) input alive: PyTorch keeps indices too.
  const DType where_dtype = int64_t{pool[0]} * pool[1] <= 256 ? dt : DType::float32;
  Tensor y, where;
  max_pool_compute(g, x, dt, where_dtype, recording, y, where);
  if (recording) {
    const Shape x_shape = x.shape();
    const bool x_is_variable = x.is_trainable_variable();
    GradientTape::record({x}, {y}, [where, g, x_shape, x_is_variable](const std::vector<Tensor>& dy, const std::vector<bool>&) {
      Tensor dx = detail::grad_buffer(x_shape, x_is_variable);
      if (detail::compute(dx, {&dy[0], &where}) && dx.size() > 0) {
        dx.fill(0.0f);
        if (where.dtype() == DType::bfloat16) {
          max_pool_backward(g, where.bfloat16_data(), dy[0].data(), dx.data());
        } else {
          max_pool_backward(g, where.data(), dy[0].data(), dx.data());
        }
      }
      return std::vector<Tensor>{dx};
    });
  }
  return y;
}

Tensor avg_pool2d(const Tensor& x, std::array<int, 2> pool, std::array<int, 2> strides, Padding padding) {
  const PoolGeometry g = pool_geometry("avg_pool2d", x.shape(), pool, strides, padding);
  const int64_t C = g.channels, H = g.h.input, W = g.w.input;
  const DType dt = compute_dtype();
  const Tensor xv = detail::operand(x, dt).value;
  Tensor y = detail::output_buffer({g.batch, g.h.output, g.w.output, C}, dt);
  if (detail::compute(y, {&xv}) && y.size() > 0) {
    const float* xd = xv.data();
    float* yd = y.data();
    for_each_window(g, [&](const WindowRange& r, int64_t out, int64_t n) {
      float* __restrict__ o = yd + out * C;
      const float* image = xd + n * H * W * C;
      std::fill(o, o + C, 0.0f);
      for (int64_t h = r.h_lo; h < r.h_hi; ++h) {
        for (int64_t w = r.w_lo; w < r.w_hi; ++w) {
          const float* __restrict__ s = image + (h * W + w) * C;
          for (int64_t c = 0; c < C; ++c) o[c] += s[c];
        }
      }
      const float inv = 1.0f / static_cast<float>(r.count());
      for (int64_t c = 0; c < C; ++c) o[c] *= inv;
    });
  }
  y = detail::finish(y, dt);
  if (GradientTape::is_recording({&x})) {
    const Shape in_shape = x.shape();
    const bool is_variable = x.is_trainable_variable();
    GradientTape::record({x}, {y}, [g, in_shape, is_variable](const std::vector<Tensor>& dy, const std::vector<bool>&) {
      const int64_t C = g.channels, H = g.h.input, W = g.w.input;
      Tensor dx = detail::grad_buffer(in_shape, is_variable);
      if (detail::compute(dx, {&dy[0]}) && dx.size() > 0) {
        dx.fill(0.0f);
        const float* dyd = dy[0].data();
        float* dxd = dx.data();
        for_each_window(g, [&](const WindowRange& r, int64_t out, int64_t n) {
          const float inv = 1.0f / static_cast<float>(r.count());
          const float* __restrict__ g_out = dyd + out * C;
          float* dimage = dxd + n * H * W * C;
          for (int64_t h = r.h_lo; h < r.h_hi; ++h) {
            for (int64_t w = r.w_lo; w < r.w_hi; ++w) {
              float* __restrict__ d = dimage + (h * W + w) * C;
              for (int64_t c = 0; c < C; ++c) d[c] += g_out[c] * inv;
            }
          }
        });
      }
      return std::vector<Tensor>{dx};
    });
  }
  return y;
}

Tensor global_avg_pool2d(const Tensor& x) {
  if (x.rank() != 4) detail::shape_error("global_avg_pool2d", "input must be NHWC (rank 4), got " + shape_string(x.shape()));
  const int64_t N = x.dim(0), HW = x.dim(1) * x.dim(2), C = x.dim(3);
  if (HW == 0) detail::shape_error("global_avg_pool2d", "input " + shape_string(x.shape()) + " has no pixels to average");
  const float inv = 1.0f / static_cast<float>(HW);
  const DType dt = compute_dtype();
  const Tensor xv = detail::operand(x, dt).value;
  Tensor y = detail::output_buffer({N, C}, dt);
  if (detail::compute(y, {&xv}) && y.size() > 0) {
    for (int64_t n = 0; n < N; ++n) {
      Eigen::Map<Eigen::RowVectorXf>(y.data() + n * C, C) = ConstMatrixMap(xv.data() + n * HW * C, HW, C).colwise().sum() * inv;
    }
  }
  y = detail::finish(y, dt);
  if (GradientTape::is_recording({&x})) {
    const Shape in_shape = x.shape();
    const bool is_variable = x.is_trainable_variable();
    GradientTape::record({x}, {y}, [in_shape, is_variable, inv](const std::vector<Tensor>& dy, const std::vector<bool>&) {
      // dx[n, h, w, :] = dy[n, :] / (H * W)
      Tensor dx = detail::grad_buffer(in_shape, is_variable);
      const int64_t N = in_shape[0], HW = in_shape[1] * in_shape[2], C = in_shape[3];
      if (detail::compute(dx, {&dy[0]}) && dx.size() > 0) {
        for (int64_t n = 0; n < N; ++n) {
          MatrixMap(dx.data() + n * HW * C, HW, C).rowwise() =
              Eigen::Map<const Eigen::RowVectorXf>(dy[0].data() + n * C, C) * inv;
        }
      }
      return std::vector<Tensor>{dx};
    });
  }
  return y;
}

}  // namespace keel::ops
