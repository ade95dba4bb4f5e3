// How oneDNN's convolutions (conv_onednn.cc) cut their work into tasks: counts of images, bands of
// an image's rows and blocks of output channels, from the convolution's shape alone, never from the
// threads, so that the bits do not depend on them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "framework/core/thread_pool.h"
#include "framework/ops/conv_geometry.h"

namespace keel::ops::detail {

// The largest divisor of n that is at most limit (at least 1).
inline int64_t largest_divisor_up_to(int64_t n, int64_t limit) {
  int64_t best = 1;
  for (int64_t t = 1; t <= std::min(limit, n); ++t) {
    if (n % t == 0) best = t;
  }
  return best;
}

// Tasks over the batch: a divisor of it (equal tasks, one primitive), as many as the work is worth
// (at least min_flops_per_task each: each task is a call with its own overheads, and fewer images
// per call run slower), at most kMaxTasks. The shape alone decides.
inline constexpr int64_t kMaxTasks = 16;
inline int64_t wanted_tasks(const ConvGeometry& g, double min_flops_per_task) {
  const double flops = 2.0 * static_cast<double>(g.rows()) * static_cast<double>(g.patch()) * static_cast<double>(g.out_channels);
  return std::clamp<int64_t>(static_cast<int64_t>(flops / min_flops_per_task), 1, kMaxTasks);
}
inline int64_t image_tasks(const ConvGeometry& g, double min_flops_per_task) {
  return largest_divisor_up_to(g.batch, wanted_tasks(g, min_flops_per_task));
}
// Forward and backward_data tasks: 2 x kMinFlopsPerThread each (at 32x32, ResNet50's first-stage
// convolutions, 67 MFLOP, were one task under 8x, the kernel gradient's until 2026-11-29, and the
// second thread waited: 12% of a training step, 4 interleaved pairs; 1x ran no faster than 2x).
// Their images are independent, so the task count never changes a bit.
inline int64_t data_tasks(const ConvGeometry& g) { return image_tasks(g, 2 * kMinFlopsPerThread); }

// The kernel gradient's tasks: as many as data_tasks, fewer where their partial kernels would exceed
// twice the kernel or 4 MiB, whichever is larger. The count decides the order the partial sums add
// in, so the shape alone decides it. (At 8 x kMinFlopsPerThread a task, ResNet50's 151-MFLOP 3x3
// kernel gradients at 32x32 were one task each while the second thread waited.)
inline int64_t kernel_gradient_tasks(const ConvGeometry& g) {
  const size_t kernel_bytes = static_cast<size_t>(g.patch() * g.out_channels) * sizeof(float);
  const size_t cap = std::max(2 * kernel_bytes, size_t{4} << 20);
  const int64_t by_memory = std::max<int64_t>(1, static_cast<int64_t>(cap / std::max<size_t>(kernel_bytes, 1)));
  return largest_divisor_up_to(g.batch, std::min(data_tasks(g), by_memory));
}

// Blocks of output channels the kernel gradient is cut into, each over the whole batch (one call per
// block, no partial sums to add; each block reads all of x), wherever that makes more tasks than
// kernel_gradient_tasks's images: the deep layers' large kernels, whose partial sums cap image tasks
// at 2, and layers of 128 or more output channels over a batch of one or two. As many blocks as the
// work is worth (wanted_tasks), each a multiple of kMinChannelBlock channels; 1: tasks of images.
inline constexpr int64_t kMinChannelBlock = 64;
inline int64_t kernel_gradient_channel_blocks(const ConvGeometry& g) {
  const int64_t want = wanted_tasks(g, 2 * kMinFlopsPerThread);
  int64_t blocks = 1;
  for (int64_t t = 2; t <= want; ++t) {
    if (g.out_channels % (t * kMinChannelBlock) == 0) blocks = t;
  }
  return blocks > kernel_gradient_tasks(g) ? blocks : 1;
}

// Bands of rows per image (forward: output rows; input gradient, stride 1: input rows) where the
// batch makes fewer tasks than the work is worth (a batch of 8 at 224x224 is 8 tasks; 16 threads
// want 16): the tasks data_tasks wanted, over the images, at most one per kMinBandRows rows; 1 where
// whole images are enough. The shape alone decides.
inline constexpr int64_t kMinBandRows = 4;
inline int64_t wanted_bands(const ConvGeometry& g) {
  const int64_t want = wanted_tasks(g, 2 * kMinFlopsPerThread);
  return g.batch < 1 || want < 2 * g.batch ? 1 : std::min(want / g.batch, g.h.output / kMinBandRows);
}
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
