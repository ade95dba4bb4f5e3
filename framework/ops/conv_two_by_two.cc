// Row views (conv_two_by_two.h): pixel (i, r, c) of x at x + ((2 i + r) 2 + c) Cin, so image row
// (i, r) is 2 Cin consecutive floats and the rows of one r across images are 4 Cin apart; the same
// for y and dy with Cout. Tap (ky, kx) of the kernel is the (Cin x Cout) matrix at (3 ky + kx) Cin
// Cout. Output pixel (oy, ox) reads input pixel (iy, ix) through tap (iy - oy + 1, ix - ox + 1).
#include "framework/ops/conv_two_by_two.h"

#include <algorithm>
#include <cstdint>

#include "framework/core/thread_pool.h"
#include "framework/ops/gemm.h"
#include "framework/ops/sgemm.h"

namespace keel::ops::detail {
namespace {

// Images per task: a shape's tasks, never the threads'.
constexpr int64_t kImagesPerTask = 32;

struct Dims {
  int64_t images, cin, cout;
  int64_t blocks() const { return (images + kImagesPerTask - 1) / kImagesPerTask; }
  int64_t first(int64_t block) const { return block * kImagesPerTask; }
  int64_t count(int64_t block) const { return std::min(kImagesPerTask, images - first(block)); }
  // Tap (ky, kx) of a kernel or of its gradient.
  template <class T>
  T* tap(T* kernel, int64_t ky, int64_t kx) const {
    return kernel + (3 * ky + kx) * cin * cout;
  }
  // Each pass's arithmetic: 16 pixel pairs of Cin x Cout multiply-adds per image.
  double flops() const { return 2.0 * 16 * static_cast<double>(images * cin * cout); }
};

Dims dims_of(const ConvGeometry& g) { return {g.batch, g.in_channels, g.out_channels}; }

// Tasks `per_block` x blocks of images, on as many threads as their arithmetic is worth.
template <class Fn>
void for_each_task(const Dims& d, int64_t per_block, Fn fn) {
  parallel_for(
      per_block * d.blocks(), [&](int64_t t) { fn(t % per_block, t / per_block); },
      threads_worth(d.flops(), kGemmMinFlopsPerThread));
}

}  // namespace

// Output column ox of a block of images: the same image row through kernel row 1 (taps (1, 1 - ox)
// and (1, 2 - ox) against both input pixels, every image row at once), then the other image row
// through kernel row 2 (output row 0) or 0 (output row 1).
void two_by_two_forward(const ConvGeometry& g, const float* x, const float* kernel, float* y) {
  const Dims d = dims_of(g);
  for_each_task(d, 2, [&](int64_t ox, int64_t block) {
    const int64_t i0 = d.first(block), n = d.count(block);
    const float* xb = x + i0 * 4 * d.cin;
    float* yb = y + i0 * 4 * d.cout + ox * d.cout;
    sgemm({xb, 2 * d.cin}, {d.tap(kernel, 1, 1 - ox), d.cout}, yb, 2 * d.cout, 2 * n, d.cout, 2 * d.cin, false);
    for (int64_t oy = 0; oy < 2; ++oy) {
      const int64_t iy = 1 - oy, ky = iy - oy + 1;
      sgemm({xb + iy * 2 * d.cin, 4 * d.cin}, {d.tap(kernel, ky, 1 - ox), d.cout}, yb + oy * 2 * d.cout, 4 * d.cout,
            n, d.cout, 2 * d.cin, true);
    }
  });
}

namespace {

// dx's input column ix of a block of images: the same image row from both output pixels (taps
// (1, ix + 1) and (1, ix), transposed), then the other image row's, output column 0 before 1.
void input_column(const Dims& d, const float* kernel, const float* dy, float* dx, int64_t ix, int64_t block) {
  const int64_t i0 = d.first(block), n = d.count(block);
  const float* dyb = dy + i0 * 4 * d.cout;
  float* dxb = dx + i0 * 4 * d.cin + ix * d.cin;
  for (int64_t ox = 0; ox < 2; ++ox) {
    sgemm({dyb + ox * d.cout, 2 * d.cout}, {d.tap(kernel, 1, ix - ox + 1), d.cout, true}, dxb, 2 * d.cin, 2 * n, d.cin,
          d.cout, ox > 0);
  }
  for (int64_t iy = 0; iy < 2; ++iy) {
    const int64_t oy = 1 - iy, ky = iy - oy + 1;
    for (int64_t ox = 0; ox < 2; ++ox) {
      sgemm({dyb + oy * 2 * d.cout + ox * d.cout, 4 * d.cout}, {d.tap(kernel, ky, ix - ox + 1), d.cout, true},
            dxb + iy * 2 * d.cin, 4 * d.cin, n, d.cin, d.cout, true);
    }
  }
}

// dkernel's tap (ky, kx) over every image: xᵀ · dy over the pixel pairs it joins. The centre tap
// joins each pixel with itself (every pixel at once); the rest of kernel row 1 one column of every
// image row with the other; kernel rows 0 and 2 one image row with the other, a pair of columns at
// a time.
void kernel_tap(const Dims& d, const float* x, const float* dy, float* dk, int64_t ky, int64_t kx) {
  float* out = d.tap(dk, ky, kx);
  const int64_t n = d.images;
  if (ky == 1 && kx == 1) {
    sgemm({x, d.cin, true}, {dy, d.cout}, out, d.cout, d.cin, d.cout, 4 * n, false);
    return;
  }
  if (ky == 1) {  // input column kx / 2 against output column 1 - kx / 2, in every image row
    const int64_t ix = kx / 2, ox = 1 - ix;
    sgemm({x + ix * d.cin, 2 * d.cin, true}, {dy + ox * d.cout, 2 * d.cout}, out, d.cout, d.cin, d.cout, 2 * n, false);
    return;
  }
  const int64_t oy = ky == 2 ? 0 : 1, iy = 1 - oy;
  bool first = true;
  for (int64_t ox = 0; ox < 2; ++ox) {
    const int64_t ix = ox + kx - 1;
    if (ix < 0 || ix > 1) continue;
    sgemm({x + (iy * 2 + ix) * d.cin, 4 * d.cin, true}, {dy + (oy * 2 + ox) * d.cout, 4 * d.cout}, out, d.cout, d.cin,
          d.cout, n, !first);
    first = false;
  }
}

}  // namespace

void two_by_two_backward(const ConvGeometry& g, const float* x, const float* kernel, const float* dy, float* dx,
                         float* dkernel) {
  const Dims d = dims_of(g);
  if (dx != nullptr) {
    for_each_task(d, 2, [&](int64_t ix, int64_t block) { input_column(d, kernel, dy, dx, ix, block); });
  }
  if (dkernel != nullptr) {
    parallel_for(
        9, [&](int64_t t) { kernel_tap(d, x, dy, dkernel, t / 3, t % 3); }, threads_worth(d.flops(), kGemmMinFlopsPerThread));
  }
}

}  // namespace keel::ops::detail
