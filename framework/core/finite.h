// Whether a float buffer holds only finite values (no NaN, no infinity).
#pragma once

#include <cmath>
#include <cstdint>

#include <Eigen/Core>

namespace keel {

// x * 0 is (+-)0 for a finite x and NaN otherwise, so the sum is NaN exactly when some element is not
// finite; Eigen sums in SIMD packets, with no branch per element.
inline bool all_finite(const float* values, int64_t count) {
  return std::isfinite((Eigen::Map<const Eigen::ArrayXf>(values, static_cast<Eigen::Index>(count)) * 0.0f).sum());
}

}  // namespace keel
