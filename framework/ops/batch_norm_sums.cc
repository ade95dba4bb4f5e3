#include "framework/ops/batch_norm_sums.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace keel::ops::detail {

#if defined(__AVX512F__)
// gcc 12 reads the "undefined" pass-through operand of the cvtps_pd/extract intrinsics as
// uninitialised once several groups' chains are inlined into one loop: a false alarm.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
namespace {
__m256 upper_half(__m512 v) { return _mm512_castps512_ps256(_mm512_shuffle_f32x4(v, v, 0xEE)); }
// Rows prefetched ahead: each row's 64 bytes of a group are a stride of `channels` floats apart.
constexpr int64_t kAhead = 16;

// One pass down rows [r0, r1) for G consecutive groups of channels from c: every channel's sums
// still one chain in row order (the same bits as a group at a time), G groups' chains interleaved so
// that the adds' latency overlaps (a group alone waits on it: 2 or 4 chains of 4-cycle adds a row).
template <int G>
void group_sums(const float* dy, const float* x, const float* mean, const float* scale, const float* beta,
                int64_t channels, int64_t r0, int64_t r1, int64_t c, double* s_dy, double* s_dy_xc) {
  const bool relu = scale != nullptr;
  __m512d dy_lo[G], dy_hi[G], xc_lo[G], xc_hi[G];
  for (int j = 0; j < G; ++j) {
    const int64_t cj = c + j * kChannelGroup;
    dy_lo[j] = _mm512_loadu_pd(s_dy + cj), dy_hi[j] = _mm512_loadu_pd(s_dy + cj + 8);
    xc_lo[j] = _mm512_loadu_pd(s_dy_xc + cj), xc_hi[j] = _mm512_loadu_pd(s_dy_xc + cj + 8);
  }
  for (int64_t r = r0; r < r1; ++r) {
    if (r + kAhead < r1) {
      for (int j = 0; j < G; ++j) {  // a group's 64 bytes of each row
        _mm_prefetch(reinterpret_cast<const char*>(dy + (r + kAhead) * channels + c + j * kChannelGroup), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(x + (r + kAhead) * channels + c + j * kChannelGroup), _MM_HINT_T0);
      }
    }
    for (int j = 0; j < G; ++j) {
      const int64_t cj = c + j * kChannelGroup;
      __m512 g = _mm512_loadu_ps(dy + r * channels + cj);
      const __m512 xm = _mm512_sub_ps(_mm512_loadu_ps(x + r * channels + cj), _mm512_loadu_ps(mean + cj));
      if (relu) {  // g where the normalised value is > 0 (false for NaN, as the scalar test)
        const __m512 z = _mm512_fmadd_ps(xm, _mm512_loadu_ps(scale + cj), _mm512_loadu_ps(beta + cj));
        g = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_GT_OQ), g);
      }
      const __m512 p = _mm512_mul_ps(g, xm);
      dy_lo[j] = _mm512_add_pd(dy_lo[j], _mm512_cvtps_pd(_mm512_castps512_ps256(g)));
      dy_hi[j] = _mm512_add_pd(dy_hi[j], _mm512_cvtps_pd(upper_half(g)));
      xc_lo[j] = _mm512_add_pd(xc_lo[j], _mm512_cvtps_pd(_mm512_castps512_ps256(p)));
      xc_hi[j] = _mm512_add_pd(xc_hi[j], _mm512_cvtps_pd(upper_half(p)));
    }
  }
  for (int j = 0; j < G; ++j) {
    const int64_t cj = c + j * kChannelGroup;
    _mm512_storeu_pd(s_dy + cj, dy_lo[j]);
    _mm512_storeu_pd(s_dy + cj + 8, dy_hi[j]);
    _mm512_storeu_pd(s_dy_xc + cj, xc_lo[j]);
    _mm512_storeu_pd(s_dy_xc + cj + 8, xc_hi[j]);
  }
}

template <int G>
void group_moment_sums(const float* x, const double* mean, int64_t channels, int64_t r0, int64_t r1, int64_t c,
                       double* s) {
  __m512d lo[G], hi[G], m_lo[G], m_hi[G];
  for (int j = 0; j < G; ++j) {
    const int64_t cj = c + j * kChannelGroup;
    m_lo[j] = mean != nullptr ? _mm512_loadu_pd(mean + cj) : _mm512_setzero_pd();
    m_hi[j] = mean != nullptr ? _mm512_loadu_pd(mean + cj + 8) : _mm512_setzero_pd();
    lo[j] = _mm512_loadu_pd(s + cj), hi[j] = _mm512_loadu_pd(s + cj + 8);
  }
  for (int64_t r = r0; r < r1; ++r) {
    for (int j = 0; j < G && r + kAhead < r1; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(x + (r + kAhead) * channels + c + j * kChannelGroup), _MM_HINT_T0);
    }
    for (int j = 0; j < G; ++j) {
      const __m512 v = _mm512_loadu_ps(x + r * channels + c + j * kChannelGroup);
      const __m512d v_lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v)), v_hi = _mm512_cvtps_pd(upper_half(v));
      if (mean == nullptr) {
        lo[j] = _mm512_add_pd(lo[j], v_lo);
        hi[j] = _mm512_add_pd(hi[j], v_hi);
      } else {
        const __m512d d_lo = _mm512_sub_pd(v_lo, m_lo[j]), d_hi = _mm512_sub_pd(v_hi, m_hi[j]);
        lo[j] = _mm512_fmadd_pd(d_lo, d_lo, lo[j]);
        hi[j] = _mm512_fmadd_pd(d_hi, d_hi, hi[j]);
      }
    }
  }
  for (int j = 0; j < G; ++j) {
    _mm512_storeu_pd(s + c + j * kChannelGroup, lo[j]);
    _mm512_storeu_pd(s + c + j * kChannelGroup + 8, hi[j]);
  }
}

}  // namespace

int64_t channel_group_sums(const float* dy, const float* x, const float* mean, const float* scale, const float* beta,
                           int64_t channels, int64_t r0, int64_t r1, int64_t c0, int64_t c1, double* s_dy,
                           double* s_dy_xc) {
  for (; c0 + 4 * kChannelGroup <= c1; c0 += 4 * kChannelGroup) {
    group_sums<4>(dy, x, mean, scale, beta, channels, r0, r1, c0, s_dy, s_dy_xc);
  }
  for (; c0 + 2 * kChannelGroup <= c1; c0 += 2 * kChannelGroup) {
    group_sums<2>(dy, x, mean, scale, beta, channels, r0, r1, c0, s_dy, s_dy_xc);
  }
  for (; c0 + kChannelGroup <= c1; c0 += kChannelGroup) group_sums<1>(dy, x, mean, scale, beta, channels, r0, r1, c0, s_dy, s_dy_xc);
  return c0;
}

int64_t channel_group_moment_sums(const float* x, const double* mean, int64_t channels, int64_t r0, int64_t r1,
                                  int64_t c0, int64_t c1, double* s) {
  for (; c0 + 4 * kChannelGroup <= c1; c0 += 4 * kChannelGroup) group_moment_sums<4>(x, mean, channels, r0, r1, c0, s);
  for (; c0 + kChannelGroup <= c1; c0 += kChannelGroup) group_moment_sums<1>(x, mean, channels, r0, r1, c0, s);
  return c0;
}
#else
int64_t channel_group_moment_sums(const float*, const double*, int64_t, int64_t, int64_t, int64_t c0, int64_t, double*) {
  return c0;
}
int64_t channel_group_sums(const float*, const float*, const float*, const float*, const float*, int64_t, int64_t,
                           int64_t, int64_t c0, int64_t, double*, double*) {
  return c0;
}
#endif

}  // namespace keel::ops::detail
