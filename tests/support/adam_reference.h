// Test support for the optimizers (framework/train/optimizers.h): Keras's Adam (default betas and
// epsilon) computed element by element in the operations keel's update uses (explicit fmas, an
// exact square root), so an update must give its bits exactly.
//
//   AdamReference r{w0, zeros, zeros};
//   adam_reference_step(r, g, 0.003f, 1);  // r.w, r.m, r.v after step 1
#pragma once

#include <cmath>
#include <vector>

namespace keel::testing {

struct AdamReference {
  std::vector<float> w, m, v;
};

// One Adam update (1-based `step`) of every element of r with gradients g.
inline void adam_reference_step(AdamReference& r, const std::vector<float>& g, float learning_rate, int step) {
  const float alpha = static_cast<float>(learning_rate * std::sqrt(1.0 - std::pow(0.999f, static_cast<double>(step))) /
                                         (1.0 - std::pow(0.9f, static_cast<double>(step))));
  for (size_t i = 0; i < r.w.size(); ++i) {
    r.m[i] = std::fma(g[i] - r.m[i], 1.0f - 0.9f, r.m[i]);
    r.v[i] = std::fma(std::fma(g[i], g[i], -r.v[i]), 1.0f - 0.999f, r.v[i]);
    r.w[i] -= (alpha * r.m[i]) / (std::sqrt(r.v[i]) + 1e-7f);
  }
}

}  // namespace keel::testing
