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
  int64_t chunk_rows() const {
    return std::clamp<int64_t>(kChunkFloats / std::max<int64_t>(patch(), 1), 1, std::max<int64_t>(rows(), 1));
  }
};

// How many bands of ceil(total / wanted) rows cover `total` rows (none empty).
inline int64_t band_count(int64_t total, int64_t wanted) {
  if (wanted < 2) return 1;
  const int64_t rows = (total + wanted - 1) / wanted;
  return (total + rows - 1) / rows;
}

// Band b of `bands` of one image: output rows [out_row, + g.h.output) and input rows [in_row, +
// g.h.input) as a convolution of their own (the image's padding where the band reaches its top or
// bottom): the output rows cut, with the input rows they read; or (input_rows, stride 1) the input
// rows cut, with the output rows whose windows reach them (an input gradient's band). oneDNN computes
// each element as in the whole image: the same bits (conv_onednn_test.cc). False where that is no
// convolution (then whole images).
struct Band {
  int64_t in_row = 0, out_row = 0;
  ConvGeometry g;
};
inline bool band_of(const ConvGeometry& whole, bool input_rows, int64_t b, int64_t bands, Band& band) {
  const WindowAxis& a = whole.h;
  const int64_t eff = a.effective_kernel();
  int64_t ih0, ih1, oh0, oh1;
  if (!input_rows) {
    const int64_t rows = (a.output + bands - 1) / bands;
    oh0 = b * rows, oh1 = std::min(a.output, oh0 + rows);
    ih0 = std::max<int64_t>(0, oh0 * a.stride - a.pad_before);
    ih1 = std::min(a.input, (oh1 - 1) * a.stride - a.pad_before + eff);
  } else {
    if (a.stride != 1) return false;
    const int64_t rows = (a.input + bands - 1) / bands;
    ih0 = b * rows, ih1 = std::min(a.input, ih0 + rows);
    oh0 = std::max<int64_t>(0, ih0 + a.pad_before - eff + 1);
    oh1 = std::min(a.output, ih1 + a.pad_before);
  }
  band.in_row = ih0, band.out_row = oh0;
  band.g = whole;
  band.g.batch = 1;
  band.g.h.input = ih1 - ih0;
  band.g.h.output = oh1 - oh0;
  band.g.h.pad_before = ih0 - (oh0 * a.stride - a.pad_before);
  band.g.h.pad_after = (oh1 - 1) * a.stride - a.pad_before + eff - ih1;
  const WindowAxis& s = band.g.h;
  return s.input > 0 && s.output > 0 && s.pad_before >= 0 && s.pad_after >= 0 &&
         (s.input + s.pad_before + s.pad_after - eff) / a.stride + 1 == s.output;
}

}  // namespace keel::ops::detail
