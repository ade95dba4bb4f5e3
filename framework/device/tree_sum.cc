// The replicas' sums in ReductionTree's order (framework/device/collectives.h): one pass over the
// inputs, divided and checked for non-finite values while each chunk is in cache.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <stdexcept>
#include <vector>

#include "framework/core/finite.h"
#include "framework/device/collectives.h"

namespace keel {

namespace {

// out[k] = partial[k] / divisor (divisor > 1), else a copy; then the first non-finite of out's `len`
// elements, or len.
int64_t store_checked(const float* partial, float* out, int64_t len, int divisor, bool check) {
  if (divides_by_reciprocal(divisor)) {  // the same bits as dividing, sooner
    const float r = 1.0f / static_cast<float>(divisor);
    for (int64_t k = 0; k < len; ++k) out[k] = partial[k] * r;
  } else if (divisor > 1) {
    const float n = static_cast<float>(divisor);
    for (int64_t k = 0; k < len; ++k) out[k] = partial[k] / n;
  } else if (out != partial && len > 0) {
    std::memcpy(out, partial, static_cast<size_t>(len) * sizeof(float));
  }
  if (!check || all_finite(out, len)) return len;
  int64_t k = 0;
  while (std::isfinite(out[k])) ++k;
  return k;
}

// The tree of N (a power of two) inputs at element k: the two halves' trees added, which is the
// level-by-level order of tree_sum_into.
template <int N>
inline float tree_at(const float* const* p, int64_t k) {
  if constexpr (N == 1) {
    return p[0][k];
  } else {
    return tree_at<N / 2>(p, k) + tree_at<N / 2>(p + N / 2, k);
  }
}

// out[at, at + len) = the tree's sums (divided by divisor > 1) in one pass over the inputs, which may
// include out itself (each element is read before it is written).
template <int N>
void tree_rows(std::span<const float* const> in, int64_t at, int64_t len, float* out, int divisor) {
  const float* p[N];
  for (int j = 0; j < N; ++j) p[j] = in[j] + at;
  if (divides_by_reciprocal(divisor)) {  // the same bits as dividing, sooner
    const float r = 1.0f / static_cast<float>(divisor);
#pragma GCC ivdep
    for (int64_t k = 0; k < len; ++k) out[k] = tree_at<N>(p, k) * r;
  } else if (divisor > 1) {
    const float d = static_cast<float>(divisor);
#pragma GCC ivdep
    for (int64_t k = 0; k < len; ++k) out[k] = tree_at<N>(p, k) / d;
  } else {
#pragma GCC ivdep
    for (int64_t k = 0; k < len; ++k) out[k] = tree_at<N>(p, k);
  }
}

// tree_sum_into for 2, 4, 8 or 16 inputs: the same sums, element by element (no partial buffers).
int64_t tree_sum_pow2(std::span<const float* const> in, float* out, int64_t count, int divisor, bool check) {
  constexpr int64_t kChunk = 4096;  // the check reads each chunk while it is in cache
  int64_t first_non_finite = count;
  for (int64_t at = 0; at < count; at += kChunk) {
    const int64_t len = std::min(kChunk, count - at);
    switch (in.size()) {
      case 2: tree_rows<2>(in, at, len, out + at, divisor); break;
      case 4: tree_rows<4>(in, at, len, out + at, divisor); break;
      case 8: tree_rows<8>(in, at, len, out + at, divisor); break;
      default: tree_rows<16>(in, at, len, out + at, divisor); break;
    }
    if (check && first_non_finite == count) {
      const int64_t bad = store_checked(out + at, out + at, len, 1, true);
      if (bad < len) first_non_finite = at + bad;
    }
  }
  return first_non_finite;
}

}  // namespace

int64_t tree_sum_into(std::span<const float* const> in, float* out, int64_t count, int divisor, bool check) {
  const size_t n = in.size();
  if (n == 0) throw std::logic_error("tree_sum: no inputs");
  int64_t first_non_finite = count;
  if (n == 1) {
    for (int64_t at = 0; at < count; at += int64_t{1} << 16) {  // pieces: the check reads them in cache
      const int64_t len = std::min(int64_t{1} << 16, count - at);
      const int64_t bad = store_checked(in[0] + at, out + at, len, divisor, check && first_non_finite == count);
      if (bad < len) first_non_finite = at + bad;
    }
    return first_non_finite;
  }
  if (n == 2 || n == 4 || n == 8 || n == 16) return tree_sum_pow2(in, out, count, divisor, check);
  // Level by level over a chunk small enough to stay in cache: level 1 pairs (x0 + x1), (x2 + x3), ...
  // and each further level adds the partial sum of the subtree `stride` away.
  constexpr int64_t kChunk = 1024;
  thread_local std::vector<float> partial;
  if (partial.size() < n * kChunk) partial.resize(n * kChunk);
  for (int64_t at = 0; at < count; at += kChunk) {
    const int64_t len = std::min(kChunk, count - at);
    for (size_t j = 0; j < n; j += 2) {
      float* t = partial.data() + j * kChunk;
      const float* a = in[j] + at;
      if (j + 1 < n) {
        const float* b = in[j + 1] + at;
        for (int64_t k = 0; k < len; ++k) t[k] = a[k] + b[k];
      } else {
        std::memcpy(t, a, static_cast<size_t>(len) * sizeof(float));
      }
    }
    for (size_t stride = 2; stride < n; stride *= 2) {
      for (size_t j = 0; j + stride < n; j += 2 * stride) {
        float* t = partial.data() + j * kChunk;
        const float* u = partial.data() + (j + stride) * kChunk;
        for (int64_t k = 0; k < len; ++k) t[k] += u[k];
      }
    }
    const int64_t bad = store_checked(partial.data(), out + at, len, divisor, check && first_non_finite == count);
    if (bad < len) first_non_finite = at + bad;
  }
  return first_non_finite;
}

void tree_sum(std::span<const float* const> in, float* out, int64_t count) { tree_sum_into(in, out, count, 1, false); }

int64_t tree_mean_checked(std::span<const float* const> in, float* out, int64_t count, int divisor) {
  return tree_sum_into(in, out, count, divisor, true);
}

}  // namespace keel
