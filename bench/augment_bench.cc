// The input pipeline's cost of `keel train --augment`: one epoch of Fashion-MNIST's 60,000 training
// images through the CLI's pipelines for a 32x32x1 model, timed without training.
//
//   build/bench/augment_bench [SPEC] [THREADS]     (defaults: flip,crop:4 and 2 map threads)
//
// Without augmentation (the CLI's path): shuffle -> batch(256) -> map(resize each batch to 32x32).
// With SPEC: shuffle -> map_with_key(resize to 32x32 + the augmentation, THREADS threads) -> batch(256).
// Prints seconds per epoch and images/s for both, best of 3 epochs each.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "datasets/fashion_mnist.h"
#include "datasets/image_ops.h"
#include "datasets/preprocessing.h"
#include "framework/data/dataset.h"
#include "framework/device/context.h"

namespace {

double seconds_per_epoch(const keel::Dataset& ds) {
  double best = 1e30;
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    keel::Iterator it = ds.make_iterator(epoch);
    int64_t batches = 0;
    while (it.next()) ++batches;
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (batches != 234) std::fprintf(stderr, "unexpected: %lld batches\n", static_cast<long long>(batches));
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string spec = argc > 1 ? argv[1] : "flip,crop:4";
  const int64_t threads = argc > 2 ? std::atoll(argv[2]) : 2;
  const keel::Shape input = {32, 32, 1};
  keel::LabeledImages train = keel::load_fashion_mnist("train");  // images (60000, 28, 28)
  const keel::Dataset shuffled = keel::Dataset::from_tensor_slices({train.images, train.labels}).shuffle(60000, 1);

  const keel::Dataset plain = shuffled.batch(256, /*drop_remainder=*/true).map([input](const keel::Element& e) {
    return keel::Element{keel::adapt_images(e[0], input), e[1]};
  });
  const auto augmentation = keel::preprocessing::Augmentation::parse(spec, input, 1);
  const keel::Dataset augmented =
      shuffled
          .map_with_key(
              [&augmentation, input](const keel::Element& e, const keel::ElementKey& key) {
                keel::Element example = e;
                example[0] = keel::resize(e[0].reshape({28, 28, 1}), input[0], input[1]);
                return augmentation(example, key);
              },
              threads)
          .batch(256, /*drop_remainder=*/true);

  const double a = seconds_per_epoch(plain), b = seconds_per_epoch(augmented);
  std::printf("no augmentation: %.2f s per epoch (%.0f images/s)\n", a, 59904 / a);
  std::printf("--augment %s, %lld map threads: %.2f s per epoch (%.0f images/s)\n", spec.c_str(),
              static_cast<long long>(threads), b, 59904 / b);
  return 0;
}
