// conv2d's two float32 backends side by side, layer by layer: oneDNN's convolutions (the default) and
// keel's im2col + Eigen GEMMs (ops::set_conv_backend): forward, each gradient alone (the time of
// forward and that backward, less forward's), forward + both gradients, best of `repeats` each, on a
// share of `threads` threads. The oneDNN column is the default backend, which keeps im2col where
// oneDNN measured slower (ops/conv_onednn.h: under 256 output pixels; dx of inputs under 16 channels;
// a pointwise convolution's kernel gradient, one product): for those pointwise layers the last column
// times that product and oneDNN's own kernel gradient (what the default ran before), each alone.
//   build/bench/conv_bench [threads] [repeats] [resnet|pointwise]
//   pointwise: ResNet50's 1x1 stride-1 shapes at 224x224 b8 and 32x32 b32 instead of the mixed list
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "framework/autodiff/tape.h"
#include "framework/core/host_threads.h"
#include "framework/core/thread_pool.h"
#include "framework/ops/conv.h"
#include "framework/ops/conv_onednn.h"
#include "framework/ops/gemm.h"
#include "framework/ops/shared_kernels.h"

namespace {

struct Layer {
  const char* name;
  int64_t n, h, w, cin, cout, k, stride;
};

template <class F>
double best_ms(int repeats, F&& f) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

keel::Tensor random_tensor(const keel::Shape& s, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(keel::num_elements(s)));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& f : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    f = static_cast<float>(x >> 40) / static_cast<float>(1 << 24) - 0.5f;
  }
  return keel::Tensor::from_vector(s, v);
}

struct Timing {
  double forward = 0, step = 0, dx_only = 0, dk_only = 0;
  keel::Tensor y;
};

Timing time_backend(keel::ops::ConvBackend backend, const Layer& l, const keel::Tensor& x, const keel::Tensor& kernel,
                    const keel::Tensor& dy, int repeats) {
  keel::ops::set_conv_backend(backend);
  const int s = static_cast<int>(l.stride);
  Timing t;
  t.forward = best_ms(repeats, [&] { t.y = keel::ops::conv2d(x, kernel, {s, s}, keel::ops::Padding::same); });
  auto step = [&](bool want_dx, bool want_dk) {
    return best_ms(repeats, [&] {
      keel::GradientTape tape;
      if (want_dx) tape.watch(x);
      if (want_dk) tape.watch(kernel);
      keel::Tensor y = keel::ops::conv2d(x, kernel, {s, s}, keel::ops::Padding::same);
      std::vector<keel::Tensor> sources;
      if (want_dx) sources.push_back(x);
      if (want_dk) sources.push_back(kernel);
      tape.gradient(y, sources, nullptr, dy);
    });
  };
  t.step = step(true, true);
  t.dx_only = step(true, false);
  t.dk_only = step(false, true);
  return t;
}

keel::ops::detail::ConvGeometry geometry(const Layer& l) {
  keel::ops::detail::ConvGeometry g;
  g.batch = l.n, g.in_channels = l.cin, g.out_channels = l.cout;
  g.h = keel::ops::window_axis("conv2d", l.h, l.k, l.stride, 1, keel::ops::Padding::same);
  g.w = keel::ops::window_axis("conv2d", l.w, l.k, l.stride, 1, keel::ops::Padding::same);
  return g;
}

// Where the default backend leaves a pointwise layer's kernel gradient to one product (oneDNN runs
// its y and dx), that product and oneDNN's own kernel gradient, each timed alone, as a table cell
// ("product / oneDNN's own", ms); "-" elsewhere.
std::string pointwise_dk(const Layer& l, const keel::Tensor& x, const keel::Tensor& kernel, const keel::Tensor& dy,
                         int repeats) {
  namespace d = keel::ops::detail;
  const d::ConvGeometry g = geometry(l);
  if (!d::onednn_runs(g) || d::onednn_runs_dk(g)) return "-";
  keel::Tensor dk = keel::Tensor::empty(kernel.shape());
  const double product = best_ms(repeats, [&] {
    d::gemm(keel::MatrixMap(dk.data(), l.cin, l.cout), keel::ConstMatrixMap(x.data(), g.rows(), l.cin).transpose(),
            keel::ConstMatrixMap(dy.data(), g.rows(), l.cout));
  });
  const d::KernelRef k = d::kernel_ref(kernel);
  const double own = best_ms(repeats, [&] {
    d::onednn_conv_backward(g, x.data(), false, k, dy.data(), nullptr, dk.data(), false, true, true);
  });
  char cell[48];
  std::snprintf(cell, sizeof cell, "%.2f / %.2f", product, own);
  return cell;
}

void run(const Layer& l, int repeats) {
  const keel::Tensor x = random_tensor({l.n, l.h, l.w, l.cin}, 1);
  const keel::Tensor kernel = random_tensor({l.k, l.k, l.cin, l.cout}, 2);
  const int64_t oh = (l.h + l.stride - 1) / l.stride, ow = (l.w + l.stride - 1) / l.stride;
  const keel::Tensor dy = random_tensor({l.n, oh, ow, l.cout}, 3);
  const double flops = 2.0 * static_cast<double>(l.n * oh * ow * l.cout * l.k * l.k * l.cin);
  const Timing a = time_backend(keel::ops::ConvBackend::im2col, l, x, kernel, dy, repeats);
  const Timing b = time_backend(keel::ops::ConvBackend::onednn, l, x, kernel, dy, repeats);
  float diff = 0, scale = 0;
  for (int64_t i = 0; i < a.y.size(); ++i) {
    diff = std::max(diff, std::abs(a.y.data()[i] - b.y.data()[i]));
    scale = std::max(scale, std::abs(a.y.data()[i]));
  }
  const std::string own = pointwise_dk(l, x, kernel, dy, repeats);
  std::printf("| %s | %.2f (%.0f) | %.2f (%.0f) | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f | %.2f | %.1e | %s |\n", l.name,
              a.forward, flops / a.forward / 1e6, b.forward, flops / b.forward / 1e6, a.dx_only - a.forward,
              b.dx_only - b.forward, a.dk_only - a.forward, b.dk_only - b.forward, a.step, b.step, a.step / b.step,
              diff / std::max(scale, 1e-30f), own.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  const bool pointwise = argc > 3 && std::strcmp(argv[3], "pointwise") == 0;
  if (argc > 3 && !pointwise && std::strcmp(argv[3], "resnet") != 0) {
    std::fprintf(stderr, "conv_bench: the layer set is resnet or pointwise\n");
    return 2;
  }
  keel::set_host_threads(threads);
  keel::KernelThreadsScope share(threads);
  const Layer pointwise_layers[] = {
      {"ResNet50 224 b8: 1x1 64->64 @56", 8, 56, 56, 64, 64, 1, 1},
      {"ResNet50 224 b8: 1x1 64->256 @56", 8, 56, 56, 64, 256, 1, 1},
      {"ResNet50 224 b8: 1x1 256->64 @56", 8, 56, 56, 256, 64, 1, 1},
      {"ResNet50 224 b8: 1x1 128->512 @28", 8, 28, 28, 128, 512, 1, 1},
      {"ResNet50 224 b8: 1x1 512->128 @28", 8, 28, 28, 512, 128, 1, 1},
      {"ResNet50 224 b8: 1x1 256->1024 @14", 8, 14, 14, 256, 1024, 1, 1},
      {"ResNet50 224 b8: 1x1 1024->256 @14", 8, 14, 14, 1024, 256, 1, 1},
      {"ResNet50 224 b8: 1x1 512->2048 @7", 8, 7, 7, 512, 2048, 1, 1},
      {"ResNet50 224 b8: 1x1 2048->512 @7", 8, 7, 7, 2048, 512, 1, 1},
      {"ResNet50 32 b32: 1x1 64->64 @8", 32, 8, 8, 64, 64, 1, 1},
      {"ResNet50 32 b32: 1x1 64->256 @8", 32, 8, 8, 64, 256, 1, 1},
      {"ResNet50 32 b32: 1x1 256->64 @8", 32, 8, 8, 256, 64, 1, 1},
      {"ResNet50 32 b32: 1x1 128->512 @4", 32, 4, 4, 128, 512, 1, 1},
      {"ResNet50 32 b32: 1x1 512->128 @4", 32, 4, 4, 512, 128, 1, 1},
  };
  const Layer resnet_layers[] = {
      {"ResNet50 224 b8: 7x7/2 3->64", 8, 230, 230, 3, 64, 7, 2},
      {"ResNet50 224 b8: 1x1 64->64 @56", 8, 56, 56, 64, 64, 1, 1},
      {"ResNet50 224 b8: 3x3 64 @56", 8, 56, 56, 64, 64, 3, 1},
      {"ResNet50 224 b8: 1x1 64->256 @56", 8, 56, 56, 64, 256, 1, 1},
      {"ResNet50 224 b8: 3x3 128 @28", 8, 28, 28, 128, 128, 3, 1},
      {"ResNet50 224 b8: 3x3 256 @14", 8, 14, 14, 256, 256, 3, 1},
      {"ResNet50 224 b8: 1x1 1024->256 @14", 8, 14, 14, 1024, 256, 1, 1},
      {"ResNet50 224 b8: 3x3 512 @7", 8, 7, 7, 512, 512, 3, 1},
      {"ResNet18 32 b32: 7x7/2 1->64", 32, 38, 38, 1, 64, 7, 2},
      {"ResNet18 32 b32: 3x3 64 @8", 32, 8, 8, 64, 64, 3, 1},
      {"ResNet18 32 b32: 3x3 128 @4", 32, 4, 4, 128, 128, 3, 1},
      {"ResNet18 32 b32: 3x3 512 @1 (im2col)", 32, 1, 1, 512, 512, 3, 1},
      {"ResNet18 56 b32: 3x3 64 @14", 32, 14, 14, 64, 64, 3, 1},
      {"ResNet18 56 b32: 3x3 256 @4", 32, 4, 4, 256, 256, 3, 1},
      {"ResNet50 32 b32: 3x3 256 @2 (taps)", 32, 2, 2, 256, 256, 3, 1},
  };
  const std::span<const Layer> layers = pointwise ? std::span<const Layer>(pointwise_layers) : std::span<const Layer>(resnet_layers);
  std::printf("conv2d on %d thread(s), best of %d: milliseconds (GFLOP/s)\n\n", threads, repeats);
  std::printf("| layer | im2col forward | oneDNN forward | dx im2col / oneDNN | dkernel im2col / oneDNN | fwd+bwd im2col / oneDNN | fwd+bwd speed-up | max rel. difference | pointwise dkernel alone: product / oneDNN's own |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const Layer& l : layers) run(l, repeats);
  return 0;
}
