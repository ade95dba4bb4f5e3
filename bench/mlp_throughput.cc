// keel's side of the MLP benchmark: the seed's MLP on Fashion-MNIST, timed over whole epochs of fit().
//
//   build/bench/mlp_throughput --device cpu --batch-per-core 128 [--epochs 1]
//
// Prints one JSON line: {"framework": "keel", "device": ..., "samples_per_sec": ...,
// "steady_samples_per_sec": (the epochs after the first; the one epoch if there is one),
// "best_epoch_samples_per_sec": (the fastest of those epochs: on a machine shared with other guests,
// the figure least moved by them, for comparing builds side by side), "epoch_seconds": ..., "final_loss": ..., "test_accuracy": ...}. Loading and evaluation are not timed; the input
// pipeline (shuffle, batch, prefetch) and the per-core infeed are, as in PyTorch's loop.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "framework/data/dataset.h"
#include "datasets/fashion_mnist.h"
#include "framework/device/context.h"
#include "framework/layers/core_layers.h"
#include "framework/layers/initializers.h"
#include "framework/model/model.h"

int main(int argc, char** argv) {
  std::string device = "cpu";
  int64_t batch_per_core = 128;
  int epochs = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--device")) device = argv[i + 1];
    else if (!std::strcmp(argv[i], "--batch-per-core")) batch_per_core = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--epochs")) epochs = std::atoi(argv[i + 1]);
  }
  keel::LabeledImages train = keel::load_fashion_mnist("train");
  keel::LabeledImages test = keel::load_fashion_mnist("test");
  keel::Tensor x, x_test;
  {
    keel::HostScope host;
    x = train.images.reshape({train.images.dim(0), 784});
    x_test = test.images.reshape({test.images.dim(0), 784});
  }
  keel::set_random_seed(0);
  keel::ReplicatedStrategy strategy(keel::DeviceSpec::preset(device));
  std::unique_ptr<keel::Model> model;
  {
    auto scope = strategy.scope();
    model = std::make_unique<keel::Sequential>(
        std::vector<keel::LayerPtr>{keel::Dense(128, "relu", keel::Shape{784}), keel::Dense(10, "softmax")});
    model->compile(std::make_shared<keel::Adam>(), std::make_shared<keel::SparseCategoricalCrossentropy>());
  }
  const int64_t global = batch_per_core * strategy.num_replicas();
  keel::Dataset ds = keel::Dataset::from_tensor_slices({x, train.labels})
                         .shuffle(60000, 0)
                         .batch(global, /*drop_remainder=*/true)
                         .prefetch(keel::AUTOTUNE);
  // Each epoch's time, so that steady_samples_per_sec can leave out the first (start-up: the shuffle
  // buffer's first fill, the allocator's first blocks, the threads' first hand-offs).
  struct EpochTimes : keel::Callback {
    std::vector<double> seconds;
    std::chrono::steady_clock::time_point begin;
    void on_epoch_begin(keel::TrainingState&) override { begin = std::chrono::steady_clock::now(); }
    void on_epoch_end(keel::TrainingState&, const keel::Logs&) override {
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
    }
  } epoch_times;
  keel::FitOptions options;
  options.epochs = epochs;
  options.callbacks.push_back(&epoch_times);
  const auto start = std::chrono::steady_clock::now();
  keel::History history = model->fit(ds, options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t epoch_samples = (60000 / global) * global;  // whole batches only
  const int64_t samples = epoch_samples * epochs;
  double steady_seconds = 0;  // the epochs after the first (all of one epoch's when there is one)
  double best_seconds = 0;  // the fastest of them
  for (size_t e = epoch_times.seconds.size() > 1 ? 1 : 0; e < epoch_times.seconds.size(); ++e) {
    steady_seconds += epoch_times.seconds[e];
    if (best_seconds == 0 || epoch_times.seconds[e] < best_seconds) best_seconds = epoch_times.seconds[e];
  }
  const int64_t steady_samples = epoch_samples * (epochs > 1 ? epochs - 1 : 1);
  keel::Logs eval = model->evaluate(keel::Dataset::from_tensor_slices({x_test, test.labels}).batch(global));
  std::printf("{\"framework\": \"keel\", \"device\": \"%s\", \"batch_per_core\": %lld, \"samples_per_sec\": %.1f, "
              "\"steady_samples_per_sec\": %.1f, \"best_epoch_samples_per_sec\": %.1f, \"epoch_seconds\": %.4f, \"final_loss\": %.6f, \"test_accuracy\": %.4f}\n",
              device.c_str(), static_cast<long long>(batch_per_core), static_cast<double>(samples) / seconds,
              static_cast<double>(steady_samples) / steady_seconds,
              static_cast<double>(epoch_samples) / best_seconds, seconds / epochs, history.epochs.back().at("loss"),
              eval.at("accuracy"));
  return 0;
}
