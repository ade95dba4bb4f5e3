#include "tests/support/training_cases.h"

#include "framework/core/random.h"
#include "framework/train/losses.h"
#include "framework/train/optimizers.h"
#include "models/zoo.h"

namespace keel::testing {

std::unique_ptr<Model> build_compiled(const Case& c) {
  std::unique_ptr<Model> m = zoo::build(c.model, {c.input, 10});
  m->compile(std::make_shared<Adam>(), std::make_shared<CategoricalCrossentropy>());
  return m;
}

Batch random_batch(const Case& c, uint64_t seed, int64_t rows) {
  HostScope host;
  if (rows < 0) rows = c.batch_per_core * c.device.cores;
  Shape x = c.input;
  x.insert(x.begin(), rows);
  Batch b{Tensor::empty(x), Tensor::zeros({rows, 10})};
  Rng rng(seed);
  for (int64_t i = 0; i < b.images.size(); ++i) b.images.data()[i] = rng.next_float();
  for (int64_t i = 0; i < rows; ++i) b.labels.data()[i * 10 + static_cast<int64_t>(rng.next_below(10))] = 1.0f;
  return b;
}

}  // namespace keel::testing
