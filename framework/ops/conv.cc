// conv2d, NHWC (zero_pad2d: zero_pad.cc). Convolutions run on oneDNN (conv_onednn.cc; bfloat16 ones where the
// CPU has its bfloat16 kernels) unless set_conv_backend(im2col) says otherwise; the rest here: im2col + Eigen
// GEMMs, chunk by chunk of output pixels. Inside a chunk, blocks of output pixels (multiples of
// ops/gemm.h's row block) are im2col'ed and multiplied on the replica's share of the threads; col2im
// runs one image and 16 channels per task. Bounds follow the shape alone: the same bits with any
// number of threads, and as one GEMM per chunk.
#include "framework/ops/conv.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "framework/autodiff/tape.h"
#include "framework/core/thread_pool.h"
#include "framework/device/context.h"
#include "framework/ops/conv_geometry.h"
#include "framework/ops/conv_onednn.h"
#include "framework/ops/conv_two_by_two.h"
#include "framework/ops/gemm.h"
#include "framework/ops/op_util.h"
#include "framework/ops/ops.h"
#include "framework/ops/replicated_kernel_gradient.h"

namespace keel::ops {

namespace {

using detail::ConvGeometry;

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
// The inputs of im2col: float32, or bfloat16 (bits) widened as they are copied.
inline void widen(const float* src, float* dst, int64_t n) { std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); }
inline void widen(const uint16_t* src, float* dst, int64_t n) { from_bfloat16(src, dst, n); }

template <typename T>
void im2col(const T* x, const ConvGeometry& g, int64_t row0, int64_t count, float* cols) {
  const int64_t H = g.h.input, W = g.w.input, C = g.in_channels, KH = g.h.kernel, KW = g.w.kernel;
  const int64_t dh = g.h.dilation, dw = g.w.dilation, patch = g.patch(), tap_row = KW * C;
  PixelCursor p(g, row0);
  for (int64_t r = 0; r < count; ++r, p.next()) {
    float* dst = cols + r * patch;
    const T* image = x + p.n * H * W * C;
    const int64_t top = p.top(), left = p.left();
    const auto [b_lo, b_hi] = valid_taps(left, KW, dw, W);
    for (int64_t a = 0; a < KH; ++a) {
      float* d = dst + a * tap_row;
      const int64_t ih = top + a * dh;
      if (ih < 0 || ih >= H || b_lo == b_hi) {
        std::memset(d, 0, static_cast<size_t>(tap_row) * sizeof(float));
        continue;
      }
      const T* src = image + ih * W * C;
      std::memset(d, 0, static_cast<size_t>(b_lo * C) * sizeof(float));
      if (dw == 1) {  // the taps in range are one contiguous run of the input row
        widen(src + (left + b_lo) * C, d + b_lo * C, (b_hi - b_lo) * C);
      } else {
        for (int64_t b = b_lo; b < b_hi; ++b) widen(src + (left + b * dw) * C, d + b * C, C);
      }
      std::memset(d + b_hi * C, 0, static_cast<size_t>((KW - b_hi) * C) * sizeof(float));
    }
  }
}

// The adjoint of im2col: dx (N, H, W, Cin) += the patches in dcols (count, KH*KW*Cin) for rows
// [row0, row0 + count), channels [c0, c1) only; taps in the padding are dropped.
void col2im_add(const float* dcols, const ConvGeometry& g, int64_t row0, int64_t count, int64_t c0, int64_t c1, float* dx) {
  const int64_t H = g.h.input, W = g.w.input, C = g.in_channels, KH = g.h.kernel, KW = g.w.kernel;
  const int64_t dh = g.h.dilation, dw = g.w.dilation, patch = g.patch(), tap_row = KW * C;
  const bool all_channels = c0 == 0 && c1 == C;
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
      if (dw == 1 && all_channels) {  // one contiguous run of the input row
        float* __restrict__ db = d + (left + b_lo) * C;
        const float* __restrict__ sb = s + b_lo * C;
        for (int64_t i = 0; i < (b_hi - b_lo) * C; ++i) db[i] += sb[i];
      } else {
        for (int64_t b = b_lo; b < b_hi; ++b) {
          float* __restrict__ db = d + (left + b * dw) * C;
          const float* __restrict__ sb = s + b * C;
          for (int64_t c = c0; c < c1; ++c) db[c] += sb[c];
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

// Runs block(r0, rn) over the output pixel rows [r0, r0 + rn) of a chunk of n rows, in blocks of a
// whole number of GEMM row blocks, on the replica's share of the threads.
template <class Block>
void for_each_pixel_block(const ConvGeometry& g, int64_t n, Block&& block) {
  const detail::TileAxis blocks(n, detail::gemm_row_block(g.out_channels, g.patch()));
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(g.patch()) * static_cast<double>(g.out_channels);
  parallel_for(
      blocks.tiles, [&](int64_t b) { block(blocks.begin(b), blocks.end(b) - blocks.begin(b)); },
      threads_worth(flops, kMinFlopsPerThread));
}

// out (n, Cout) = im2col(x)[row0, row0 + n) · kernel, through `cols` (n, patch). With many pixel
// blocks, each block is im2col'ed and multiplied on one thread (its patches still in cache); with few
// (small images deep in a network), the blocks are im2col'ed, then one tiled product cuts the columns
// too. Either way, the bits of one product over the chunk.
template <typename T>
void forward_chunk(const ConvGeometry& g, const T* x, int64_t row0, int64_t n, const ConstMatrixMap& k, float* cols,
                   float* out) {
  const int64_t patch = g.patch(), cout = g.out_channels;
  if (detail::TileAxis(n, detail::gemm_row_block(cout, patch)).tiles >= detail::kGemmTargetTiles) {
    for_each_pixel_block(g, n, [&](int64_t r0, int64_t rn) {
      im2col(x, g, row0 + r0, rn, cols + r0 * patch);
      detail::sgemm(detail::gemm_operand(ConstMatrixMap(cols + r0 * patch, rn, patch)), detail::gemm_operand(k),
                    out + r0 * cout, cout, rn, cout, patch, /*accumulate=*/false);
    });
  } else {
    for_each_pixel_block(g, n, [&](int64_t r0, int64_t rn) { im2col(x, g, row0 + r0, rn, cols + r0 * patch); });
    detail::gemm(MatrixMap(out, n, cout), ConstMatrixMap(cols, n, patch), k);
  }
}

// A pointwise or single-tap convolution (conv_geometry.h) is one GEMM on x viewed as (N*H*W, Cin),
// against the (Cin, Cout) slice of the kernel this returns the offset of; -1 for the others.
int64_t gemm_slice(const ConvGeometry& g) {
  if (g.pointwise()) return 0;
  const int64_t tap = g.single_tap();
  return tap < 0 ? -1 : tap * g.in_channels * g.out_channels;
}

// Forward in float32: one GEMM for a pointwise or single-tap convolution, else im2col chunk by chunk.
void forward_float32(const ConvGeometry& g, const float* x, const float* kernel, float* y) {
  const int64_t rows = g.rows(), patch = g.patch(), cout = g.out_channels, cin = g.in_channels;
  if (const int64_t slice = gemm_slice(g); slice >= 0) {
    if (x != nullptr) {
      detail::gemm(MatrixMap(y, rows, cout), ConstMatrixMap(x, rows, cin), ConstMatrixMap(kernel + slice, cin, cout));
    }
    return;
  }
  if (g.two_by_two()) {  // the taps' products alone, no workspace (conv_two_by_two.h)
    if (x != nullptr) detail::two_by_two_forward(g, x, kernel, y);
    return;
  }
  Tensor cols = cols_workspace(g);
  if (x == nullptr) return;  // planning: the workspace is charged all the same
  const ConstMatrixMap k(kernel, patch, cout);
  for (int64_t row0 = 0; row0 < rows; row0 += g.chunk_rows()) {
    forward_chunk(g, x, row0, std::min(g.chunk_rows(), rows - row0), k, cols.data(), y + row0 * cout);
  }
}

// A single-tap convolution's bfloat16 input widened whole into a float32 workspace (N, Cin) for its
// float32 form's GEMM (the same bits); charged on planning runs too (x == nullptr).
Tensor widened_input(const ConvGeometry& g, const uint16_t* x) {
  CategoryScope workspace(Category::workspace);
  Tensor wide = Tensor::empty({g.rows(), g.in_channels});
  if (x != nullptr) from_bfloat16(x, wide.data(), wide.size());
  return wide;
}

// Forward on a bfloat16 input into a bfloat16 output, chunk by chunk (pointwise convolutions too):
// the chunk's patches widened into float32, one GEMM into a float32 chunk of y, rounded into y.
// No x- or y-sized float32 buffer exists but a single-tap convolution's (its float32 form, rounded).
void forward_bfloat16(const ConvGeometry& g, const uint16_t* x, const float* kernel, uint16_t* y) {
  const int64_t rows = g.rows(), patch = g.patch(), cout = g.out_channels;
  if (!g.pointwise() && g.single_tap() >= 0) {
    const Tensor wide = widened_input(g, x);
    CategoryScope workspace(Category::workspace);
    Tensor out = Tensor::empty({rows, cout});
    if (x == nullptr) return;
    forward_float32(g, wide.data(), kernel, out.data());
    to_bfloat16(out.data(), y, rows * cout);
    return;
  }
  Tensor cols = cols_workspace(g);
  Tensor out = [&] {
    CategoryScope workspace(Category::workspace);
    return Tensor::empty({g.chunk_rows(), cout});
  }();
  if (x == nullptr) return;
  const ConstMatrixMap k(kernel, patch, cout);
  for (int64_t row0 = 0; row0 < rows; row0 += g.chunk_rows()) {
    const int64_t n = std::min(g.chunk_rows(), rows - row0);
    forward_chunk(g, x, row0, n, k, cols.data(), out.data());
    for_each_pixel_block(g, n, [&](int64_t r0, int64_t rn) {
      to_bfloat16(out.data() + r0 * cout, y + (row0 + r0) * cout, rn * cout);
    });
  }
}

// dx (+=) from the chunk's patch gradients in `cols` (rows [row0, row0 + n)), one task per image and
// block of 16 channels: each element of dx gets its terms in pixel order, as one pass over the chunk
// gives them.
void col2im_by_image(const ConvGeometry& g, const float* cols, int64_t row0, int64_t n, float* dx) {
  const int64_t per_image = g.h.output * g.w.output, first = row0 / per_image, last = (row0 + n - 1) / per_image;
  constexpr int64_t kChannelBlock = 16;
  const int64_t C = g.in_channels, channel_blocks = (C + kChannelBlock - 1) / kChannelBlock;
  const double bytes = static_cast<double>(n) * static_cast<double>(g.patch()) * sizeof(float);
  parallel_for(
      (last - first + 1) * channel_blocks,
      [&](int64_t t) {
        const int64_t i = t / channel_blocks, cb = t % channel_blocks;
        const int64_t begin = std::max(row0, (first + i) * per_image), end = std::min(row0 + n, (first + i + 1) * per_image);
        col2im_add(cols + (begin - row0) * g.patch(), g, begin, end - begin, cb * kChannelBlock,
                   std::min(C, (cb + 1) * kChannelBlock), dx);
      },
      threads_worth(bytes / sizeof(float), kMinElementsPerThread));
}

// dkernel (written by the first chunk's product, added to by the others') and dx (+=, through
// col2im) chunk by chunk; either may be null. One workspace buffer per chunk: first the im2col of x
// (for dkernel), then dy · kernelᵀ (for dx).
template <typename T>
void backward_chunks(const ConvGeometry& g, const T* x, const float* kernel, const float* dy, float* cols, float* dx,
                     float* dkernel) {
  const int64_t rows = g.rows(), patch = g.patch(), cout = g.out_channels;
  const ConstMatrixMap k(kernel, patch, cout);
  for (int64_t row0 = 0; row0 < rows; row0 += g.chunk_rows()) {
    const int64_t n = std::min(g.chunk_rows(), rows - row0);
    const ConstMatrixMap dym(dy + row0 * cout, n, cout);
    MatrixMap c(cols, n, patch);
    if (dkernel != nullptr) {
      for_each_pixel_block(g, n, [&](int64_t r0, int64_t rn) { im2col(x, g, row0 + r0, rn, cols + r0 * patch); });
      detail::gemm(MatrixMap(dkernel, patch, cout), c.transpose(), dym, /*accumulate=*/row0 > 0);
    }
    if (dx != nullptr) {
      detail::gemm(c, dym, k.transpose());
      col2im_by_image(g, cols, row0, n, dx);
    }
  }
}

// Whether backward needs the im2col workspace: for every gradient of a convolution that is neither
// pointwise nor single-tap, and for dkernel of a pointwise one on a bfloat16 input (widened chunk by
// chunk; a single-tap one's is widened whole: widened_input).
bool backward_needs_cols(const ConvGeometry& g, bool bf16, bool dx, bool dk) {
  if (g.rows() == 0 || g.out_channels == 0 || g.patch() == 0) return false;
  if (g.pointwise()) return bf16 && dk;
  return g.single_tap() < 0 && !(g.two_by_two() && !bf16) && (dx || dk);
}
// Whether the oneDNN backend's kernel gradient is oneDNN's (wanted, and not a float32 pointwise one,
// which is one product: detail::onednn_runs_dk), for the run and its plan alike.
bool onednn_computes_dk(const ConvGeometry& g, bool bf16, bool bfloat16, bool dk) {
  return dk && (bf16 || bfloat16 || detail::onednn_runs_dk(g));
}
// Whether backward widens a single-tap convolution's bfloat16 input whole, for its kernel gradient.
bool widens_whole_input(const ConvGeometry& g, bool bf16, bool dk) {
  return bf16 && dk && !g.pointwise() && g.single_tap() >= 0;
}

// The gradients of conv2d given dy: dx (N, H, W, Cin) and dkernel, where `real_*` (planning charges
// the same buffers and skips the arithmetic). x is the kept input, float32 or bfloat16; kernel the
// float32 values forward computed with. Under bfloat16 (`bfloat16`: the op computed in it) the
// products read dy rounded to bfloat16 as well: oneDNN's bfloat16 kernels round it themselves, the
// others read its rounded values (a float32 workspace).
void conv_backward(const ConvGeometry& g, const Tensor& x, const detail::KernelValues& kernel, const Tensor& dy, Tensor* dx,
                   Tensor* dk, bool onednn, bool bfloat16) {
  const int64_t rows = g.rows(), patch = g.patch(), cout = g.out_channels;
  if (rows == 0 || cout == 0 || patch == 0) {  // nothing flows: zero gradients
    if (dx != nullptr) dx->fill(0.0f);
    if (dk != nullptr) dk->fill(0.0f);
    return;
  }
  const bool bf16 = x.dtype() == DType::bfloat16;
  const bool native = onednn && bfloat16 && bf16;  // oneDNN's bfloat16 kernels
  Tensor dyv = bfloat16 && !native ? detail::compute_values(dy, DType::bfloat16) : dy;
  detail::KernelValues kv = kernel;
  if (onednn) {  // dkernel and dx where oneDNN computes them; else below
    const bool onednn_dx = dx != nullptr && detail::onednn_runs_dx(g);
    const bool onednn_dk = onednn_computes_dk(g, bf16, bfloat16, dk != nullptr);
    float* dxd = onednn_dx ? dx->data() : nullptr;
    float* dkd = onednn_dk ? dk->data() : nullptr;
    if (native) {
      detail::onednn_conv_backward_bfloat16(g, x.bfloat16_data(), kernel.ref(), dy.data(), dxd, dkd, onednn_dx,
                                            onednn_dk, /*real=*/true);
    } else {
      const void* xd = bf16 ? static_cast<const void*>(x.bfloat16_data()) : static_cast<const void*>(x.data());
      detail::onednn_conv_backward(g, xd, bf16, kernel.ref(), dyv.data(), dxd, dkd, onednn_dx, onednn_dk,
                                   /*real=*/true);
    }
    if (onednn_dx) dx = nullptr;
    if (onednn_dk) dk = nullptr;
    if (dx == nullptr && dk == nullptr) return;
    if (native) {  // dx below on the rounded values of dy and of the kernel (which may come unrounded)
      dyv = detail::compute_values(dy, DType::bfloat16);
      kv = detail::KernelValues::of(kernel.tensor(), DType::bfloat16);
    }
  }
  const int64_t slice = gemm_slice(g), cin = g.in_channels;
  if (slice >= 0 && dx != nullptr) {  // dx = dy · kernelᵀ (the tap's slice; the others read padding)
    detail::gemm(MatrixMap(dx->data(), rows, cin), ConstMatrixMap(dyv.data(), rows, cout),
                 ConstMatrixMap(kv.data() + slice, cin, cout).transpose());
    dx = nullptr;
  }
  if (slice >= 0 && dk != nullptr && !(bf16 && g.pointwise())) {  // a pointwise one's bfloat16 x: below
    // dkernel = xᵀ · dy with x viewed as (N*H*W, Cin), at the slice; the other taps saw only padding
    const Tensor wide = bf16 ? widened_input(g, x.bfloat16_data()) : Tensor();
    if (patch != cin) dk->fill(0.0f);  // the GEMM then writes the tap's slice
    detail::gemm(MatrixMap(dk->data() + slice, cin, cout), ConstMatrixMap(bf16 ? wide.data() : x.data(), rows, cin).transpose(),
                 ConstMatrixMap(dyv.data(), rows, cout));
    dk = nullptr;
  }
  if (g.two_by_two() && !bf16) {  // float32 x: the taps' products alone, no workspace (conv_two_by_two.h)
    detail::two_by_two_backward(g, x.data(), kv.data(), dyv.data(), dx ? dx->data() : nullptr, dk ? dk->data() : nullptr);
    return;
  }
  if (!backward_needs_cols(g, bf16, dx != nullptr, dk != nullptr)) return;
  Tensor cols = cols_workspace(g);
  if (dx != nullptr) dx->fill(0.0f);  // col2im adds
  float* dxd = dx != nullptr ? dx->data() : nullptr;
  float* dkd = dk != nullptr ? dk->data() : nullptr;
  if (bf16) {
    backward_chunks(g, x.bfloat16_data(), kv.data(), dyv.data(), cols.data(), dxd, dkd);
  } else {
    backward_chunks(g, x.data(), kv.data(), dyv.data(), cols.data(), dxd, dkd);
  }
}

// Planning: charges what conv_backward would, in its order (dy's rounded values, oneDNN's buffers,
// then im2col's).
void plan_backward(const ConvGeometry& g, const Tensor& dy, const Tensor& kernel, bool bf16, bool onednn, bool dx, bool dk,
                   bool bfloat16) {
  if (g.rows() == 0 || g.out_channels == 0 || g.patch() == 0) return;  // conv_backward charges nothing
  const bool native = onednn && bfloat16 && bf16;
  Tensor dyv = bfloat16 && !native ? detail::compute_values(dy, DType::bfloat16) : Tensor();
  if (onednn) {
    const bool onednn_dx = dx && detail::onednn_runs_dx(g);
    const bool onednn_dk = onednn_computes_dk(g, bf16, bfloat16, dk);  // else a gemm: no workspace
    if (native) {
      detail::onednn_conv_backward_bfloat16(g, nullptr, {}, nullptr, nullptr, nullptr, onednn_dx, onednn_dk, /*real=*/false);
    } else {
      detail::onednn_conv_backward(g, nullptr, bf16, {}, nullptr, nullptr, nullptr, onednn_dx, onednn_dk, /*real=*/false);
    }
    if (!dx || onednn_dx) return;
    Tensor kv;
    if (native) {
      dyv = detail::compute_values(dy, DType::bfloat16);
      kv = detail::compute_values(kernel, DType::bfloat16);
    }
    if (backward_needs_cols(g, false, true, false)) const Tensor cols = cols_workspace(g);
  } else {
    if (widens_whole_input(g, bf16, dk)) const Tensor wide = widened_input(g, nullptr);
    if (backward_needs_cols(g, bf16, dx, dk)) const Tensor cols = cols_workspace(g);
  }
}

std::atomic<ConvBackend>& backend_setting() {
  static std::atomic<ConvBackend> backend{[] {
    const char* env = std::getenv("KEEL_CONV_BACKEND");
    if (env == nullptr || *env == '\0' || std::strcmp(env, "onednn") == 0) return ConvBackend::onednn;
    if (std::strcmp(env, "im2col") == 0) return ConvBackend::im2col;
    throw std::invalid_argument("KEEL_CONV_BACKEND must be onednn or im2col, got '" + std::string(env).substr(0, 40) +
                                "': unset it or give one of those");
  }()};
  return backend;
}
}  // namespace

void set_conv_backend(ConvBackend backend) { backend_setting().store(backend); }
ConvBackend conv_backend() { return backend_setting().load(std::memory_order_relaxed); }

namespace {
std::atomic<bool> g_conv_bias_fusion{true};
}  // namespace
void set_conv_bias_fusion(bool fuse) { g_conv_bias_fusion.store(fuse); }
bool conv_bias_fusion() { return g_conv_bias_fusion.load(std::memory_order_relaxed); }

Shape conv2d_output_shape(const Shape& x, const Shape& kernel, std::array<int, 2> strides, Padding padding,
                          std::array<int, 2> dilation) {
  const ConvGeometry g = conv_geometry(x, kernel, strides, padding, dilation);
  return {g.batch, g.h.output, g.w.output, g.out_channels};
}

namespace {

// What a recorded conv2d keeps for backward: x as kept and the kernel variable (or its kept copy).
struct ConvRecord {
  Tensor x_kept, kernel_kept;
  ConvGeometry g;
  DType dt;
  bool x_is_variable, kernel_is_variable, onednn, raw_kernel;
  uint64_t kernel_placement = 0;  // detail::placement_key of the kernel
};

// dx and dkernel, where `needs` says.
std::vector<Tensor> conv_gradients(const ConvRecord& r, const Tensor& dy, const std::vector<bool>& needs) {
  std::vector<Tensor> grads(2);
  if (needs[0]) grads[0] = detail::grad_buffer(r.x_kept.shape(), r.x_is_variable);            // dx (N, H, W, Cin)
  if (needs[1]) grads[1] = detail::grad_buffer(r.kernel_kept.shape(), r.kernel_is_variable, r.kernel_placement);  // dkernel
  // The kernel as forward computed with it (the variable itself in float32); x as kept, read
  // (widened) where it is used.
  const detail::KernelValues kernel =
      r.raw_kernel ? detail::KernelValues(r.kernel_kept) : detail::KernelValues::of(r.kernel_kept, r.dt);
  const Tensor x = r.x_kept.dtype() == DType::bfloat16 ? r.x_kept : detail::compute_values(r.x_kept, r.dt);
  const bool real_dx = needs[0] && detail::compute(grads[0], {&dy, &x, &kernel.tensor()});
  const bool real_dk = needs[1] && detail::compute(grads[1], {&dy, &x, &kernel.tensor()});
  const bool bfloat16 = r.dt == DType::bfloat16;
  // A replicated pointwise (or single-tap) layer's kernel gradient: the chained products a Dense
  // kernel's takes, computed here or left to the all-reduce (ops/replicated_kernel_gradient.h);
  // nothing to plan.
  const bool chained = real_dk && r.kernel_is_variable && !bfloat16 &&
                       detail::replicated_pointwise_kernel_gradient(r.g, x, dy, grads[1]);
  if (real_dx || (real_dk && !chained)) {
    conv_backward(r.g, x, kernel, dy, real_dx ? &grads[0] : nullptr, real_dk && !chained ? &grads[1] : nullptr, r.onednn,
                  bfloat16);
  } else if (!chained) {
    plan_backward(r.g, dy, kernel.tensor(), x.dtype() == DType::bfloat16, r.onednn, needs[0], needs[1], bfloat16);
  }
  return grads;
}

// Whether conv2d adds `bias` in oneDNN's float32 forward kernel; elsewhere (im2col, bfloat16, where
// Keras's mixed policy rounds the sum first) bias_add follows the convolution.
bool bias_in_kernel(const ConvGeometry& g, const Tensor& bias, DType dt) {
  return bias.defined() && conv_bias_fusion() && dt == DType::float32 && bias.dtype() == DType::float32 && bias.rank() == 1 &&
         bias.dim(0) == g.out_channels && conv_backend() == ConvBackend::onednn && detail::onednn_runs(g);
}

// Records conv2d's backward pass: dx and dkernel, and with a bias (added in the convolution's op)
// bias_add's gradient, the column sums of dy in row order.
void record_conv2d(const Tensor& x, const Tensor& kernel, const Tensor& bias, const ConvRecord& record, const Tensor& y) {
  if (!bias.defined()) {
    GradientTape::record({x, kernel}, {y}, [record](const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
      return conv_gradients(record, dy[0], needs);
    });
    return;
  }
  const bool bias_is_variable = bias.is_trainable_variable();
  const uint64_t bias_placement = detail::placement_key(bias);
  GradientTape::record({x, kernel, bias}, {y}, [record, bias_is_variable, bias_placement](const std::vector<Tensor>& dy,
                                                                                         const std::vector<bool>& needs) {
    std::vector<Tensor> grads = conv_gradients(record, dy[0], {needs[0], needs[1]});
    Tensor db;
    if (needs[2]) {
      const int64_t c = record.g.out_channels;
      db = detail::grad_buffer({c}, bias_is_variable, bias_placement);
      if (detail::compute(db, {&dy[0]}) && c > 0) detail::parallel_column_sums(dy[0].data(), dy[0].size() / c, c, db.data());
    }
    grads.push_back(db);
    return grads;
  });
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& kernel, std::array<int, 2> strides, Padding padding,
              std::array<int, 2> dilation, const Tensor& bias) {
  if (!x.defined() || !kernel.defined()) detail::shape_error("conv2d", "undefined input or kernel");
  const ConvGeometry g = conv_geometry(x.shape(), kernel.shape(), strides, padding, dilation);
  const int64_t rows = g.rows(), patch = g.patch(), cout = g.out_channels;
  const Shape y_shape = {g.batch, g.h.output, g.w.output, cout};
  const DType dt = compute_dtype();
  const bool fused_bias = bias_in_kernel(g, bias, dt);
  if (bias.defined() && !fused_bias) return bias_add(conv2d(x, kernel, strides, padding, dilation), bias);
  // Under bfloat16 the input is read as bfloat16 (a float32 one is kept as its bfloat16 copy), the
  // kernel as its rounded float32 values.
  const Tensor x_kept = dt == DType::bfloat16 && !x.is_trainable_variable() ? x.to(DType::bfloat16) : detail::operand(x, dt).kept;
  // Convolutions go to oneDNN unless the im2col kernels were asked for (bfloat16 ones where this
  // CPU has oneDNN's bfloat16 kernels); the gradients follow forward's choice.
  const bool bf16 = x_kept.dtype() == DType::bfloat16 && dt == DType::bfloat16;
  const bool onednn = conv_backend() == ConvBackend::onednn && (bf16 ? detail::onednn_runs_bfloat16(g) : detail::onednn_runs(g));
  // On oneDNN's bfloat16 kernels a float32 variable goes in as it is: the reorder into the
  // primitive's bfloat16 layout rounds it to nearest even (a subnormal to zero, which those kernels
  // make of subnormal operands anyway), so no rounded copy is made, in forward or backward.
  const bool raw_kernel = bf16 && onednn && kernel.is_trainable_variable() && kernel.dtype() == DType::float32;
  // A variable is kept as it is; the values read are KernelValues' (its replicas share a rounding).
  const bool as_is = raw_kernel || kernel.is_trainable_variable();
  detail::Operand ko = as_is ? detail::Operand{kernel, Tensor()} : detail::operand(kernel, dt);
  detail::KernelValues kv = raw_kernel ? detail::KernelValues(kernel)
                            : as_is    ? detail::KernelValues::of(kernel, dt)
                                       : detail::KernelValues(ko.value);
  detail::count_forward_flops(2 * rows * patch * cout);
  const bool empty = rows == 0 || cout == 0 || patch == 0;
  Tensor y;
  if (bf16) {
    y = Tensor::empty(y_shape, dt);
    const bool real = detail::compute(y, {&x_kept, &kv.tensor()});
    if (real && empty) y.fill(0.0f);
    const uint16_t* xd = real ? x_kept.bfloat16_data() : nullptr;
    uint16_t* yd = real ? y.bfloat16_data() : nullptr;
    if (!empty && onednn) {
      detail::onednn_conv_forward_bfloat16(g, xd, kv.ref(), yd);
    } else if (!empty) {
      forward_bfloat16(g, xd, kv.data(), yd);
    }
  } else {
    const Tensor xv = detail::compute_values(x_kept, dt);
    Tensor out = detail::output_buffer(y_shape, dt);
    const bool real = detail::compute(out, {&xv, &kv.tensor(), &bias});
    if (real && empty) out.fill(0.0f);
    for (int64_t r = 0; real && empty && fused_bias && r < rows; ++r) std::copy_n(bias.data(), cout, out.data() + r * cout);
    if (!empty && onednn) {
      detail::onednn_conv_forward(g, real ? xv.data() : nullptr, kv.ref(), real ? out.data() : nullptr, fused_bias,
                                  fused_bias && real ? bias.data() : nullptr);
    } else if (!empty) {
      forward_float32(g, real ? xv.data() : nullptr, kv.data(), real ? out.data() : nullptr);
    }
    y = detail::finish(out, dt);
  }
  ko.value = Tensor();
  kv = detail::KernelValues();
  const ConvRecord record{x_kept, ko.kept, g, dt, x.is_trainable_variable(), kernel.is_trainable_variable(), onednn, raw_kernel,
                          detail::placement_key(kernel)};
  if (GradientTape::is_recording({&x, &kernel, &bias})) record_conv2d(x, kernel, bias, record, y);
  return y;
}

}  // namespace keel::ops
