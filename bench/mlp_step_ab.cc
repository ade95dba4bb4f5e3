// The seed MLP's training step on two devices, alternately in one process: the ratio of their step
// times where a 2-core virtual machine drifts 10-30% between minutes, which separate runs of
// bench/mlp_throughput cannot resolve. No input pipeline: each step's batch is a fresh host copy of
// one random batch, handed to the cores as fit() hands them (ReplicatedStrategy::distribute).
//
//   build/bench/mlp_step_ab [DEVICE_A PER_CORE_A DEVICE_B PER_CORE_B [ROUNDS]]   (cpu 128 v3-8 16 30)
//
// Each round times 100 steps of A, then 100 of B. Prints one JSON line: each side's median step in
// microseconds and the median over rounds of A's step time / B's (B's speed relative to A's), with
// its quartiles.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "framework/core/random.h"
#include "framework/device/context.h"
#include "framework/layers/core_layers.h"
#include "framework/layers/initializers.h"
#include "framework/model/model.h"

namespace {

struct Side {
  std::string device;
  std::unique_ptr<keel::ReplicatedStrategy> strategy;
  std::unique_ptr<keel::Model> model;
  keel::Batch batch;
};

Side make_side(const std::string& device, int64_t per_core) {
  Side s{device, std::make_unique<keel::ReplicatedStrategy>(keel::DeviceSpec::preset(device)), nullptr, {}};
  {
    auto scope = s.strategy->scope();
    s.model = std::make_unique<keel::Sequential>(
        std::vector<keel::LayerPtr>{keel::Dense(128, "relu", keel::Shape{784}), keel::Dense(10, "softmax")});
    s.model->compile(std::make_shared<keel::Adam>(), std::make_shared<keel::SparseCategoricalCrossentropy>());
  }
  const int64_t rows = per_core * s.strategy->num_replicas();
  const keel::HostScope host;
  s.batch = {keel::Tensor::empty({rows, 784}), keel::Tensor::empty({rows})};
  keel::Rng rng(3);
  for (int64_t i = 0; i < s.batch.images.size(); ++i) s.batch.images.data()[i] = rng.next_float();
  for (int64_t i = 0; i < rows; ++i) s.batch.labels.data()[i] = static_cast<float>(rng.next_below(10));
  return s;
}

// Microseconds a step, over `steps` steps.
double time_steps(Side& s, int steps) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    keel::Batch fresh;
    {
      const keel::HostScope host;
      fresh = {s.batch.images.clone(), s.batch.labels.clone()};
    }
    s.model->train_step_on_cores(s.strategy->distribute(std::move(fresh)));
  }
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / steps;
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

}  // namespace

int main(int argc, char** argv) {
  const std::string device_a = argc > 4 ? argv[1] : "cpu", device_b = argc > 4 ? argv[3] : "v3-8";
  const int64_t per_a = argc > 4 ? std::atoll(argv[2]) : 128, per_b = argc > 4 ? std::atoll(argv[4]) : 16;
  const int rounds = argc > 5 ? std::max(1, std::atoi(argv[5])) : 30;
  if ((argc != 1 && argc != 5 && argc != 6) || per_a < 1 || per_a > 65536 || per_b < 1 || per_b > 65536) {
    std::fprintf(stderr, "usage: mlp_step_ab [DEVICE_A PER_CORE_A DEVICE_B PER_CORE_B [ROUNDS]] (rows a core 1-65536)\n");
    return 2;
  }
  keel::set_random_seed(0);
  Side a, b;
  try {
    a = make_side(device_a, per_a);
    b = make_side(device_b, per_b);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlp_step_ab: %s\n", e.what());
    return 2;
  }
  time_steps(a, 50);  // warm-up: slots, the allocator's blocks, oneDNN's kernels
  time_steps(b, 50);
  std::vector<double> ta, tb, ratio;
  for (int r = 0; r < rounds; ++r) {
    ta.push_back(time_steps(a, 100));
    tb.push_back(time_steps(b, 100));
    ratio.push_back(ta.back() / tb.back());
  }
  std::printf("{\"a\": \"%s x %lld\", \"b\": \"%s x %lld\", \"a_step_us\": %.1f, \"b_step_us\": %.1f, "
              "\"b_speed_over_a\": %.3f, \"p25\": %.3f, \"p75\": %.3f}\n",
              device_a.c_str(), static_cast<long long>(per_a), device_b.c_str(), static_cast<long long>(per_b),
              quantile(ta, 0.5), quantile(tb, 0.5), quantile(ratio, 0.5), quantile(ratio, 0.25), quantile(ratio, 0.75));
  return 0;
}
