#include "framework/ops/batch_norm_sums.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace keel::ops::detail {

#if defined(__AVX512F__)
__m256 upper_half(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }
// Rows prefetched ahead: each row's 64 bytes of a group are a stride of `channels` floats apart.
constexpr int64_t kAhead = 16;

void channel_group_sums(const float* dy, const float* x, const float* mean, const float* scale, const float* beta,
                        int64_t channels, int64_t r0, int64_t r1, int64_t c, double* s_dy, double* s_dy_xc) {
  const __m512 m = _mm512_loadu_ps(mean + c);
  const bool relu = scale != nullptr;
  const __m512 k = relu ? _mm512_loadu_ps(scale + c) : _mm512_setzero_ps();
  const __m512 b = relu ? _mm512_loadu_ps(beta + c) : _mm512_setzero_ps();
  __m512d dy_lo = _mm512_loadu_pd(s_dy + c), dy_hi = _mm512_loadu_pd(s_dy + c + 8);
  __m512d xc_lo = _mm512_loadu_pd(s_dy_xc + c), xc_hi = _mm512_loadu_pd(s_dy_xc + c + 8);
  for (int64_t r = r0; r < r1; ++r) {
    if (r + kAhead < r1) {
      _mm_prefetch(reinterpret_cast<const char*>(dy + (r + kAhead) * channels + c), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(x + (r + kAhead) * channels + c), _MM_HINT_T0);
    }
    __m512 g = _mm512_loadu_ps(dy + r * channels + c);
    const __m512 xm = _mm512_sub_ps(_mm512_loadu_ps(x + r * channels + c), m);
    if (relu) {  // g where the normalised value is > 0 (false for NaN, as the scalar test)
      const __mmask16 on = _mm512_cmp_ps_mask(_mm512_fmadd_ps(xm, k, b), _mm512_setzero_ps(), _CMP_GT_OQ);
      g = _mm512_maskz_mov_ps(on, g);
    }
    const __m512 p = _mm512_mul_ps(g, xm);
    dy_lo = _mm512_add_pd(dy_lo, _mm512_cvtps_pd(_mm512_castps512_ps256(g)));
    dy_hi = _mm512_add_pd(dy_hi, _mm512_cvtps_pd(upper_half(g)));
    xc_lo = _mm512_add_pd(xc_lo, _mm512_cvtps_pd(_mm512_castps512_ps256(p)));
    xc_hi = _mm512_add_pd(xc_hi, _mm512_cvtps_pd(upper_half(p)));
  }
  _mm512_storeu_pd(s_dy + c, dy_lo);
  _mm512_storeu_pd(s_dy + c + 8, dy_hi);
  _mm512_storeu_pd(s_dy_xc + c, xc_lo);
  _mm512_storeu_pd(s_dy_xc + c + 8, xc_hi);
}

void channel_group_moment_sums(const float* x, const double* mean, int64_t channels, int64_t r0, int64_t r1, int64_t c,
                               double* s) {
  const __m512d m_lo = mean != nullptr ? _mm512_loadu_pd(mean + c) : _mm512_setzero_pd();
  const __m512d m_hi = mean != nullptr ? _mm512_loadu_pd(mean + c + 8) : _mm512_setzero_pd();
  __m512d lo = _mm512_loadu_pd(s + c), hi = _mm512_loadu_pd(s + c + 8);
  for (int64_t r = r0; r < r1; ++r) {
    if (r + kAhead < r1) _mm_prefetch(reinterpret_cast<const char*>(x + (r + kAhead) * channels + c), _MM_HINT_T0);
    const __m512 v = _mm512_loadu_ps(x + r * channels + c);
    const __m512d v_lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v)), v_hi = _mm512_cvtps_pd(upper_half(v));
    if (mean == nullptr) {
      lo = _mm512_add_pd(lo, v_lo);
      hi = _mm512_add_pd(hi, v_hi);
    } else {
      const __m512d d_lo = _mm512_sub_pd(v_lo, m_lo), d_hi = _mm512_sub_pd(v_hi, m_hi);
      lo = _mm512_fmadd_pd(d_lo, d_lo, lo);
      hi = _mm512_fmadd_pd(d_hi, d_hi, hi);
    }
  }
  _mm512_storeu_pd(s + c, lo);
  _mm512_storeu_pd(s + c + 8, hi);
}
#else
void channel_group_moment_sums(const float*, const double*, int64_t, int64_t, int64_t, int64_t, double*) {}
void channel_group_sums(const float*, const float*, const float*, const float*, const float*, int64_t, int64_t, int64_t,
                        int64_t, double*, double*) {}
#endif

}  // namespace keel::ops::detail
