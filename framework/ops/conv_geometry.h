// The geometry of one conv2d call (framework/ops/conv.cc), shared by its two kernels: im2col + Eigen
// GEMMs (conv.cc) and oneDNN's convolutions (conv_onednn.cc).
#pragma once

#include <algorithm>
#include <cstdint>

#include "framework/ops/conv.h"

namespace keel::ops::detail {

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
  // A single-pixel input whose window is padding but for one tap (a 3x3 "same" convolution on the
  // 1x1 maps deep in a ResNet on 32x32 images: 8 of its 9 taps multiply zeros): that tap's index
  // among the KH*KW, else -1. Such a convolution is the pointwise one of that tap's (Cin, Cout) slice.
  int64_t single_tap() const {
    const auto tap = [](const WindowAxis& a) -> int64_t {
      if (a.input != 1 || a.output != 1 || a.pad_before % a.dilation != 0) return -1;
      const int64_t t = a.pad_before / a.dilation;
      return t < a.kernel ? t : -1;
    };
    const int64_t th = tap(h), tw = tap(w);
    return th < 0 || tw < 0 ? -1 : th * w.kernel + tw;
  }
  // A 3x3 stride-1 "same" convolution on 2x2 maps (ResNet50's fourth stage at 32x32 inputs): every
  // output pixel sees every input pixel, each through one tap; products of those taps alone, no
  // im2col (conv_two_by_two.h).
  bool two_by_two() const {
    const auto fits = [](const WindowAxis& a) {
      return a.input == 2 && a.output == 2 && a.kernel == 3 && a.stride == 1 && a.dilation == 1 && a.pad_before == 1;
    };
    return fits(h) && fits(w);
  }
  int64_t chunk_rows() const {
    return std::clamp<int64_t>(kChunkFloats / std::max<int64_t>(patch(), 1), 1, std::max<int64_t>(rows(), 1));
  }
};

}  // namespace keel::ops::detail
