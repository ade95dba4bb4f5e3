// Convolution on NHWC images with HWIO kernels, and explicit zero padding, with TensorFlow's
// shape and padding rules. Declared here rather than in ops.h; same contract as every op there:
// outputs are charged per the thread's DeviceContext, abstract tensors skip the arithmetic, and a
// backward closure capturing only what backward needs is recorded when a tape depends on an input.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "framework/core/tensor.h"

namespace keel::ops {

// TensorFlow's padding modes (tf.nn.conv2d / tf.nn.max_pool2d `padding=`).
//   valid: no padding; out = floor((in - eff_k) / stride) + 1, and in >= eff_k is required.
//   same:  out = ceil(in / stride); total padding max((out - 1) * stride + eff_k - in, 0), of which
//          total / 2 goes before (top/left) and the rest after (bottom/right): an odd total puts the
//          extra row/column at the bottom/right.
// eff_k = (k - 1) * dilation + 1 is the window's extent in the input.
enum class Padding { valid, same };

// The geometry of a sliding window along one spatial axis (height or width).
struct WindowAxis {
  int64_t input = 0;       // -1: unknown (shape rules only); output is then -1 too
  int64_t kernel = 1;      // taps in the window
  int64_t stride = 1;
  int64_t dilation = 1;    // distance between taps
  int64_t output = 0;
  int64_t pad_before = 0;  // top / left
  int64_t pad_after = 0;   // bottom / right
  int64_t effective_kernel() const { return (kernel - 1) * dilation + 1; }
};

// The window geometry under `padding`. Throws std::invalid_argument, naming `op`, if kernel, stride
// or dilation is < 1, or if a VALID window does not fit in a known input.
WindowAxis window_axis(const std::string& op, int64_t input, int64_t kernel, int64_t stride, int64_t dilation,
                       Padding padding);

// Shape rule of conv2d: x (N, H, W, Cin) and kernel (KH, KW, Cin, Cout) -> (N, OH, OW, Cout).
// N, H or W may be -1 (unknown; Keras's None), giving -1 in the same place. Throws
// std::invalid_argument on any argument conv2d would reject.
Shape conv2d_output_shape(const Shape& x, const Shape& kernel, std::array<int, 2> strides, Padding padding,
                          std::array<int, 2> dilation = {1, 1});

// 2-D cross-correlation (tf.nn.conv2d, data_format NHWC), without bias (use bias_add):
//   y[n, i, j, o] = sum_{a, b, c} x[n, i*sh - pad_top + a*dh, j*sw - pad_left + b*dw, c] * kernel[a, b, c, o]
// with out-of-range taps reading zero.
//   x (N, H, W, Cin), kernel (KH, KW, Cin, Cout) -> (N, OH, OW, Cout); strides and dilation are
//   {height, width}, each >= 1. Unlike tf.nn.conv2d, strides > 1 combined with dilation > 1 is accepted
//   (the result is what the formula above gives, as in PyTorch).
// Computed as one GEMM against the kernel viewed as (KH*KW*Cin, Cout), over an im2col matrix built in
// chunks of rows (a `workspace` buffer of at most 2^20 floats, or of one patch row if that is
// larger, freed before the op returns); a 1x1 stride-1 convolution is a GEMM on the input itself, and
// so is one whose single-pixel input every window sees through one tap only (a 3x3 "same"
// convolution on 1x1 maps), against that tap's (Cin, Cout) slice: its other taps would multiply
// padding, and their kernel gradient is zero (a bfloat16 input is widened whole for it: N x Cin).
// Saves x and kernel (no new tensors). Backward: d_kernel = colsᵀ · dy with the im2col matrix
// recomputed chunk by chunk from x, and dx = col2im(dy · kernelᵀ), using one workspace buffer of the
// same size. Throws std::invalid_argument on bad ranks, a Cin mismatch, kernel/stride/dilation < 1,
// or a VALID window larger than the input.
// With a (Cout,) bias, conv2d then bias_add as one op where oneDNN computes a float32 convolution
// (its kernel adds the bias to each sum as it stores it: the same bits; the bias's gradient is
// bias_add's); elsewhere the two ops one after the other.
Tensor conv2d(const Tensor& x, const Tensor& kernel, std::array<int, 2> strides, Padding padding,
              std::array<int, 2> dilation = {1, 1}, const Tensor& bias = Tensor());

// The kernels of float32 convolutions: oneDNN's (the default; framework/ops/conv_onednn.h), or keel's
// own im2col + Eigen GEMMs, which bfloat16 inputs always use. Process-wide; the environment variable
// KEEL_CONV_BACKEND=onednn|im2col sets it at start-up. Both are exact to float32 rounding, not to
// each other's bits: choose one for a run (a checkpoint resumes exactly under the same one).
enum class ConvBackend { onednn, im2col };
void set_conv_backend(ConvBackend backend);
ConvBackend conv_backend();
// Whether conv2d adds a given bias in oneDNN's float32 forward kernel (the default) or as bias_add
// after the convolution (the same bits; for comparison: bench/run_fusion_bench.sh). Process-wide.
void set_conv_bias_fusion(bool fuse);
bool conv_bias_fusion();

// Shape rule of zero_pad2d: (N, H, W, C) -> (N, H + top + bottom, W + left + right, C) (-1 stays -1).
Shape zero_pad2d_output_shape(const Shape& x, std::array<int, 4> pads);

// Keras's ZeroPadding2D: x (N, H, W, C) padded with zeros, pads = {top, bottom, left, right}, each >= 0.
// Saves nothing (backward crops the gradient). Throws std::invalid_argument on rank != 4 or a negative pad.
Tensor zero_pad2d(const Tensor& x, std::array<int, 4> pads);

}  // namespace keel::ops
