// The optimizers' updates of one span of elements (Optimizer::update): Adam's and SGD's arithmetic,
// element by element in Keras's formulas, vectorised without changing a bit.
#include <bit>
#include <cmath>
#include <cstdint>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "framework/train/optimizers.h"

namespace keel {

namespace {

// Keras 3's decoupled weight decay of one element, in its order: w - (w * wd) * lr.
inline float decayed(float w, float weight_decay, float lr) { return w - w * weight_decay * lr; }

// Whether a block of kUntouchedBlock elements is one Adam leaves exactly as it is: every gradient
// ±0 and every m and v +0 (bit patterns), without weight decay. Then m' = fma(g - m, 1 - b1, m) is
// +0, v' = fma(fma(g, g, -v), 1 - b2, v) is +0 and w - (alpha·0) / (sqrt(0) + eps) is w, bit for
// bit: writing them back would change nothing but would dirty their cache lines. Such blocks are
// what a kernel's taps that only ever see padding get (a 3x3 convolution on 1x1 maps: ResNet50's
// last stage at 32x32, 27% of its parameters), and units that never fire.
constexpr int64_t kUntouchedBlock = 16;
bool untouched_by_adam(const float* g, const float* m, const float* v) {
#if defined(__AVX512F__)
  const __m512i bits = _mm512_or_si512(_mm512_and_si512(_mm512_loadu_si512(g), _mm512_set1_epi32(0x7fffffff)),
                                       _mm512_or_si512(_mm512_loadu_si512(m), _mm512_loadu_si512(v)));
  return _mm512_test_epi32_mask(bits, bits) == 0;
#else
  uint32_t bits = 0;
  for (int64_t i = 0; i < kUntouchedBlock; ++i) {
    bits |= (std::bit_cast<uint32_t>(g[i]) & 0x7fffffffu) | std::bit_cast<uint32_t>(m[i]) | std::bit_cast<uint32_t>(v[i]);
  }
  return bits == 0;
#endif
}

// Adam's arithmetic on one element, on `count` of them, and on a block (Adam::update's comments).
struct AdamStep {
  float one_minus_b1, one_minus_b2, alpha, epsilon, wd, lr;
  // kUntouchedBlock elements without weight decay: element()'s operations, 16 lanes at a time.
  void block(float* w, const float* g, float* m, float* v) const {
#if defined(__AVX512F__)
    static_assert(kUntouchedBlock == 16);
    const __m512 gv = _mm512_loadu_ps(g), mv = _mm512_loadu_ps(m), vv = _mm512_loadu_ps(v);
    const __m512 mi = _mm512_fmadd_ps(_mm512_sub_ps(gv, mv), _mm512_set1_ps(one_minus_b1), mv);
    const __m512 vi = _mm512_fmadd_ps(_mm512_fmsub_ps(gv, gv, vv), _mm512_set1_ps(one_minus_b2), vv);
    _mm512_storeu_ps(m, mi);
    _mm512_storeu_ps(v, vi);
    const __m512 root = _mm512_maskz_sqrt_ps(static_cast<__mmask16>(0xFFFF), vi);  // all lanes (gcc 12 warns on _mm512_sqrt_ps)
    const __m512 step = _mm512_div_ps(_mm512_mul_ps(_mm512_set1_ps(alpha), mi), _mm512_add_ps(root, _mm512_set1_ps(epsilon)));
    _mm512_storeu_ps(w, _mm512_sub_ps(_mm512_loadu_ps(w), step));
#else
    elements(w, g, m, v, kUntouchedBlock);
#endif
  }
  void elements(float* __restrict w, const float* __restrict g, float* __restrict m, float* __restrict v,
                int64_t count) const {
    for (int64_t i = 0; i < count; ++i) element(w[i], g[i], m[i], v[i]);
  }
  void element(float& w, float g, float& m, float& v) const {
    const float mi = std::fma(g - m, one_minus_b1, m);
    const float vi = std::fma(std::fma(g, g, -v), one_minus_b2, v);
    m = mi;
    v = vi;
    const float wi = wd > 0.0f ? decayed(w, wd, lr) : w;
    w = wi - (alpha * mi) / (std::sqrt(vi) + epsilon);
  }
};

}  // namespace

void Adam::update(const UpdateSpan& span, int64_t step) {
  const double b1 = options_.beta_1, b2 = options_.beta_2;
  const float alpha = static_cast<float>(learning_rate_at(step - 1) * std::sqrt(1.0 - std::pow(b2, static_cast<double>(step))) /
                                         (1.0 - std::pow(b1, static_cast<double>(step))));
  // Weight decay first, as Keras applies it (the same lr as the update's), in the same pass.
  // Keras: m += (g - m)(1 - b1); v += (g² - v)(1 - b2); w -= alpha m / (sqrt(v) + eps), in one pass
  // over memory. Every multiply feeding an add is an explicit fma and the rest are single IEEE
  // operations (sqrt exact, not an approximation), so the vectorised loop and its scalar end give an
  // element the same bits: whoever updates which span (replicas, threads, processes), the result is one.
  const AdamStep a{1.0f - options_.beta_1, 1.0f - options_.beta_2, alpha, options_.epsilon, weight_decay(),
                   learning_rate_at(step - 1)};
  float* w = span.variable;
  const float* g = span.gradient;
  float* m = span.slots[0];
  float* v = span.slots[1];
  if (a.wd > 0.0f) return a.elements(w, g, m, v, span.size);
  // Blocks Adam leaves as they are are skipped (untouched_by_adam), the others updated as they come.
  int64_t i = 0;
  for (; i + kUntouchedBlock <= span.size; i += kUntouchedBlock) {
    if (!untouched_by_adam(g + i, m + i, v + i)) a.block(w + i, g + i, m + i, v + i);
  }
  a.elements(w + i, g + i, m + i, v + i, span.size - i);
}

void SGD::update(const UpdateSpan& span, int64_t step) {
  // Keras: velocity = momentum velocity - lr g; w += velocity (Nesterov: w += momentum velocity -
  // lr g); without momentum w -= lr g. Explicit fmas, as in Adam::update: the same bits wherever a
  // span starts.
  float* w = span.variable;
  const float* g = span.gradient;
  const float lr = learning_rate_at(step - 1), momentum = options_.momentum;
  const float wd = weight_decay();  // applied first, as in Adam::update
  if (momentum == 0.0f) {
    for (int64_t i = 0; i < span.size; ++i) w[i] = std::fma(-lr, g[i], wd > 0.0f ? decayed(w[i], wd, lr) : w[i]);
    return;
  }
  float* velocity = span.slots[0];
  for (int64_t i = 0; i < span.size; ++i) {
    const float vi = std::fma(momentum, velocity[i], -lr * g[i]);
    velocity[i] = vi;
    const float wi = wd > 0.0f ? decayed(w[i], wd, lr) : w[i];
    w[i] = wi + (options_.nesterov ? std::fma(momentum, vi, -lr * g[i]) : vi);
  }
}

}  // namespace keel
