#include "tests/support/conv_reference.h"

#include <cmath>

#include <gtest/gtest.h>

#include "tests/support/conv_backend.h"
#include "tests/support/grad_check.h"

namespace keel::testing {

ConvReference direct_conv(const std::vector<float>& x, const std::vector<float>& k, const std::vector<float>& dy,
                          const ConvConfig& c) {
  const int64_t N = c.x[0], H = c.x[1], W = c.x[2], CI = c.x[3], KH = c.kernel[0], KW = c.kernel[1], CO = c.kernel[3];
  const ops::WindowAxis ah = ops::window_axis("ref", H, KH, c.strides[0], c.dilation[0], c.padding);
  const ops::WindowAxis aw = ops::window_axis("ref", W, KW, c.strides[1], c.dilation[1], c.padding);
  const int64_t OH = ah.output, OW = aw.output;
  ConvReference r{std::vector<double>(static_cast<size_t>(N * OH * OW * CO)), std::vector<double>(x.size()),
              std::vector<double>(k.size())};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < OH; ++i)
      for (int64_t j = 0; j < OW; ++j)
        for (int64_t a = 0; a < KH; ++a)
          for (int64_t b = 0; b < KW; ++b) {
            const int64_t h = i * ah.stride - ah.pad_before + a * ah.dilation;
            const int64_t w = j * aw.stride - aw.pad_before + b * aw.dilation;
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            for (int64_t ci = 0; ci < CI; ++ci)
              for (int64_t co = 0; co < CO; ++co) {
                const size_t xi = static_cast<size_t>(((n * H + h) * W + w) * CI + ci);
                const size_t ki = static_cast<size_t>(((a * KW + b) * CI + ci) * CO + co);
                const size_t yi = static_cast<size_t>(((n * OH + i) * OW + j) * CO + co);
                r.y[yi] += static_cast<double>(x[xi]) * k[ki];
                r.dx[xi] += static_cast<double>(dy[yi]) * k[ki];
                r.dk[ki] += static_cast<double>(dy[yi]) * x[xi];
              }
          }
  return r;
}

void expect_near_reference(const Tensor& got, const std::vector<double>& want, double tol, const std::string& what) {
  const std::vector<float> g = got.to_vector();
  ASSERT_EQ(g.size(), want.size()) << what;
  int64_t bad = 0, worst = 0;
  double worst_err = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double err = std::fabs(g[i] - want[i]) / (tol * (1 + std::fabs(want[i])));
    if (!(err <= 1)) ++bad;
    if (!(err <= worst_err)) worst_err = err, worst = static_cast<int64_t>(i);
  }
  EXPECT_EQ(bad, 0) << what << ": worst at " << index_string(got.shape(), worst) << ": got "
                    << g[static_cast<size_t>(worst)] << ", want " << want[static_cast<size_t>(worst)];
}

namespace {

void check_against_direct_on(const ConvConfig& c, uint64_t seed, const std::string& what, double tol) {
  Tensor x = random_host(c.x, -1, 1, seed), k = random_host(c.kernel, -1, 1, seed + 1);
  const Shape out = ops::conv2d_output_shape(c.x, c.kernel, c.strides, c.padding, c.dilation);
  Tensor dy = random_host(out, -1, 1, seed + 2);
  const ConvReference r = direct_conv(x.to_vector(), k.to_vector(), dy.to_vector(), c);
  Tensor y = ops::conv2d(x, k, c.strides, c.padding, c.dilation);
  ASSERT_EQ(y.shape(), out) << what;
  expect_near_reference(y, r.y, tol, what + " y");
  std::vector<Tensor> g = conv_gradients(x, k, dy, c.strides, c.padding, c.dilation);
  expect_near_reference(g[0], r.dx, tol, what + " dx");
  // dkernel sums over every output pixel (thousands of terms): float accumulation error grows.
  expect_near_reference(g[1], r.dk, 10 * tol, what + " dkernel");
}

}  // namespace

void check_against_direct(const ConvConfig& c, uint64_t seed, const std::string& what, double tol) {
  for (ops::ConvBackend b : kConvBackends) {
    const ConvBackendScope backend(b);
    check_against_direct_on(c, seed, what + " (" + conv_backend_name(b) + ")", tol);
  }
}

}  // namespace keel::testing
