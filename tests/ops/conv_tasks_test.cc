// How oneDNN's convolutions cut their work (framework/ops/conv_tasks.h), as geometry: every band of
// rows is a convolution that computes exactly its rows, with exactly the taps the whole image has.
// (That oneDNN gives a band the whole image's bits is conv_onednn_test.cc's; this sweeps shapes too
// many and too varied to convolve.)
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "framework/ops/conv.h"
#include "framework/ops/conv_tasks.h"

namespace keel {
namespace {

using ops::detail::Band;
using ops::detail::ConvGeometry;

ConvGeometry one_image(int64_t height, int64_t kernel, int64_t stride, int64_t dilation, ops::Padding padding) {
  ConvGeometry g;
  g.batch = 1, g.in_channels = 16, g.out_channels = 16;
  g.h = ops::window_axis("conv2d", height, kernel, stride, dilation, padding);
  g.w = ops::window_axis("conv2d", 8, 1, 1, 1, ops::Padding::valid);
  return g;
}

std::string describe(const ConvGeometry& g, int64_t bands, int64_t b) {
  return "H " + std::to_string(g.h.input) + " k " + std::to_string(g.h.kernel) + " s " + std::to_string(g.h.stride) + " d " +
         std::to_string(g.h.dilation) + " pad " + std::to_string(g.h.pad_before) + "/" + std::to_string(g.h.pad_after) +
         ", band " + std::to_string(b) + " of " + std::to_string(bands);
}

// Whether output row `oh`'s tap `kh` reads input row `ih` (a real row, not padding) in axis a.
int64_t tap_row(const ops::WindowAxis& a, int64_t oh, int64_t kh) { return oh * a.stride - a.pad_before + kh * a.dilation; }

// A forward band's outputs read through the band's own window exactly the input rows (and padding)
// they read in the whole image.
void expect_forward_band_exact(const ConvGeometry& g, const Band& band, const std::string& what) {
  const ops::WindowAxis& s = band.g.h;
  for (int64_t o = 0; o < s.output; ++o) {
    for (int64_t kh = 0; kh < g.h.kernel; ++kh) {
      const int64_t whole = tap_row(g.h, band.out_row + o, kh), local = tap_row(s, o, kh);
      const bool real = whole >= 0 && whole < g.h.input;
      ASSERT_EQ(real, local >= 0 && local < s.input) << what << ", output " << o << " tap " << kh;
      if (real) ASSERT_EQ(band.in_row + local, whole) << what;
    }
  }
}

// An input-gradient band holds every (output row, tap) of the whole image that reads one of its
// rows, through the same tap.
void expect_input_band_exact(const ConvGeometry& g, const Band& band, const std::string& what) {
  const ops::WindowAxis& s = band.g.h;
  for (int64_t oh = 0; oh < g.h.output; ++oh) {
    for (int64_t kh = 0; kh < g.h.kernel; ++kh) {
      const int64_t ih = tap_row(g.h, oh, kh);
      if (ih < band.in_row || ih >= band.in_row + s.input) continue;
      const int64_t o = oh - band.out_row;
      ASSERT_TRUE(o >= 0 && o < s.output) << what << ": output " << oh << " missing";
      ASSERT_EQ(tap_row(s, o, kh), ih - band.in_row) << what;
    }
  }
}

// The bands cut the output rows (forward) or the input rows (input_rows: an input gradient's, stride
// 1) in order, within the image, and each is exactly its part of it.
void expect_bands_exact(const ConvGeometry& g, int64_t bands, bool input_rows) {
  int64_t next = 0;
  for (int64_t b = 0; b < bands; ++b) {
    Band band;
    const std::string what = describe(g, bands, b);
    ASSERT_TRUE(ops::detail::band_of(g, input_rows, b, bands, band)) << what;
    ASSERT_EQ(input_rows ? band.in_row : band.out_row, next) << what;
    ASSERT_GE(band.in_row, 0) << what;
    ASSERT_LE(band.in_row + band.g.h.input, g.h.input) << what;
    next += input_rows ? band.g.h.input : band.g.h.output;
    if (input_rows) {
      expect_input_band_exact(g, band, what);
    } else {
      expect_forward_band_exact(g, band, what);
    }
  }
  EXPECT_EQ(next, input_rows ? g.h.input : g.h.output) << describe(g, bands, bands);
}

TEST(ConvTasksTest, EveryBandOfRowsIsExactlyItsPartOfTheImage) {
  int64_t input_checked = 0;
  for (int64_t height : {4, 7, 8, 13, 28, 56, 57, 112, 224}) {
    for (int64_t kernel : {1, 2, 3, 5, 7}) {
      for (int64_t stride : {1, 2, 3}) {
        for (int64_t dilation : {1, 2}) {
          for (ops::Padding padding : {ops::Padding::same, ops::Padding::valid}) {
            if ((kernel - 1) * dilation + 1 > height && padding == ops::Padding::valid) continue;
            const ConvGeometry g = one_image(height, kernel, stride, dilation, padding);
            for (int64_t wanted : {2, 3, 4, 7, 16}) {
              expect_bands_exact(g, ops::detail::band_count(g.h.output, wanted), false);
              if (stride != 1) continue;
              expect_bands_exact(g, ops::detail::band_count(g.h.input, wanted), true);
              input_checked += HasFatalFailure() ? 0 : 1;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(input_checked, 100);
}

// Bands only where the batch has fewer images than the work wants tasks, and none of fewer than
// kMinBandRows rows; kernel gradients in blocks of output channels only where that beats images.
TEST(ConvTasksTest, BandsAndChannelBlocksOnlyWhereImagesAreTooFew) {
  ConvGeometry g = one_image(56, 3, 1, 1, ops::Padding::same);
  g.in_channels = g.out_channels = 64;
  g.w = g.h;
  g.batch = 1;  // 231 MFLOP: 7 tasks wanted
  EXPECT_EQ(ops::detail::wanted_bands(g), 7);
  g.batch = 32;  // 16 tasks wanted, 32 images
  EXPECT_EQ(ops::detail::wanted_bands(g), 1);
  ConvGeometry deep = one_image(7, 3, 1, 1, ops::Padding::same);
  deep.w = deep.h;
  deep.batch = 8, deep.in_channels = 512, deep.out_channels = 512;  // 9.4 MB kernel: 2 image tasks
  EXPECT_EQ(ops::detail::kernel_gradient_tasks(deep), 2);
  EXPECT_EQ(ops::detail::kernel_gradient_channel_blocks(deep), 8);
  deep.out_channels = 48;  // no block of 64 channels
  EXPECT_EQ(ops::detail::kernel_gradient_channel_blocks(deep), 1);
}

}  // namespace
}  // namespace keel
