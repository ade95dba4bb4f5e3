#include "tests/support/training_cases.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

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

TrainedState trained_state(Model& model, const Ledger& ledger) {
  TrainedState state;
  for (Variable* v : model.variables()) state.weights.push_back(v->value().to_vector());
  for (Variable* v : model.optimizer().slot_variables()) state.weights.push_back(v->value().to_vector());
  state.memory = core_memory(ledger);
  return state;
}

void expect_same_trained_state(const TrainedState& a, const TrainedState& b, const std::string& what) {
  ASSERT_EQ(a.weights.size(), b.weights.size()) << what;
  for (size_t i = 0; i < a.weights.size(); ++i) {
    ASSERT_EQ(a.weights[i].size(), b.weights[i].size()) << what << ": weight or slot " << i;
    EXPECT_EQ(std::memcmp(a.weights[i].data(), b.weights[i].data(), a.weights[i].size() * sizeof(float)), 0)
        << what << ": weight or slot " << i << " differs";
  }
  ASSERT_EQ(a.memory.size(), b.memory.size()) << what;
  for (size_t c = 0; c < a.memory.size(); ++c) {
    EXPECT_EQ(a.memory[c].peak, b.memory[c].peak) << what << ", core " << c;
    EXPECT_EQ(a.memory[c].category_peak, b.memory[c].category_peak) << what << ", core " << c;
    EXPECT_EQ(a.memory[c].sent_bytes, b.memory[c].sent_bytes) << what << ", core " << c;
  }
}

DeferredKernelGradients::DeferredKernelGradients(bool defer) {
  if (defer) {
    unsetenv("KEEL_DEFERRED_KERNEL_GRADIENTS");
  } else {
    setenv("KEEL_DEFERRED_KERNEL_GRADIENTS", "0", 1);
  }
}

DeferredKernelGradients::~DeferredKernelGradients() { unsetenv("KEEL_DEFERRED_KERNEL_GRADIENTS"); }

}  // namespace keel::testing
