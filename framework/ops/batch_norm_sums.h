// BatchNormalization's per-channel sums over a group of channels in vector instructions: what
// batch_norm.cc's row loops compute for float32 x and dy (the backward pass's sums, the forward pass's
// moments), with the group's double sums held in registers down the rows instead of loaded and stored
// at every row (the backward loop spent most of its time on them: 6% of a ResNet50 training step at
// 32x32 on two threads).
#pragma once

#include <cstdint>

namespace keel::ops::detail {

// Whether this build has the kernel (AVX-512); without it batch_norm.cc's row loop does it all.
#if defined(__AVX512F__)
inline constexpr bool kChannelGroupSumsVectorized = true;
#else
inline constexpr bool kChannelGroupSumsVectorized = false;
#endif
inline constexpr int64_t kChannelGroup = 16;

// For the whole groups of channels in [c0, c1) (kChannelGroup each, from c0) of rows [r0, r1) of dy
// and x (row-major, `channels` floats a row): s_dy[c] += g and s_dy_xc[c] += g * (x - mean[c]) (the
// product in float), in double, row by row, with g = dy; or, where `scale` is given (a fused ReLU),
// g = dy where fma(x - mean, scale, beta) > 0 and 0 elsewhere. The same IEEE operations in the same
// order as the row loop, element by element: the same bits; several groups go down the rows together.
// Returns the first channel it left (c0 in a build without the kernel).
int64_t channel_group_sums(const float* dy, const float* x, const float* mean, const float* scale, const float* beta,
                           int64_t channels, int64_t r0, int64_t r1, int64_t c0, int64_t c1, double* s_dy,
                           double* s_dy_xc);

// For the whole groups of channels in [c0, c1) of rows [r0, r1) of x: s[c] += x, or, with `mean`
// given, s[c] = fma(x - mean[c], x - mean[c], s[c]) with x widened to double; row by row, as
// batch_norm.cc's moments loop does (the same bits). Returns the first channel it left.
int64_t channel_group_moment_sums(const float* x, const double* mean, int64_t channels, int64_t r0, int64_t r1,
                                  int64_t c0, int64_t c1, double* s);

}  // namespace keel::ops::detail
