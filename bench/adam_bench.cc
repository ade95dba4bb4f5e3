// One Adam update of ResNet50's trainable parameters (23,534,592 floats as one variable per layer
// shape would be; one variable here): milliseconds per update, best of N after a warm-up.
// bench/run_adam_bench.sh runs it beside PyTorch's torch.optim.Adam on the same number of floats.
// Usage: adam_bench [elements] [repeats] [threads]   threads: the update's share of the thread pool, as
// a replica's step gives it (default keel::host_threads(): what a one-core device such as `cpu` uses).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "framework/autodiff/variable.h"
#include "framework/core/host_threads.h"
#include "framework/core/thread_pool.h"
#include "framework/device/context.h"
#include "framework/train/optimizers.h"

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 23534592;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 20;
  const int threads = argc > 3 ? std::atoi(argv[3]) : keel::host_threads();
  if (n < 1 || repeats < 1 || threads < 1) {
    std::fprintf(stderr, "usage: adam_bench [elements >= 1] [repeats >= 1] [threads >= 1]\n");
    return 2;
  }
  keel::HostScope host;
  keel::KernelThreadsScope share(threads);
  std::vector<float> w0(static_cast<size_t>(n)), g0(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    w0[static_cast<size_t>(i)] = 0.01f * static_cast<float>(i % 1000 - 500);
    g0[static_cast<size_t>(i)] = 0.001f * static_cast<float>(i % 777 - 388);
  }
  keel::Variable w("w", keel::Tensor::from_vector({n}, w0), true);
  const keel::Tensor g = keel::Tensor::from_vector({n}, g0);
  keel::Adam adam;
  adam.apply_gradients({g}, {&w});  // builds the slots, touches every page
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    adam.apply_gradients({g}, {&w});
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf("keel Adam: %lld floats, %d thread%s, best of %d: %.2f ms per update (w[1] = %.9g)\n",
              static_cast<long long>(n), threads, threads == 1 ? "" : "s", repeats, best,
              static_cast<double>(w.value().data()[1]));
  return 0;
}
