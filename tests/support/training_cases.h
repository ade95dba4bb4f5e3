// A zoo model trained on random batches, for the tests that compare two ways of running the same
// steps bit for bit (tests/model/savers_test.cc, tests/model/layout_test.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/device/device_spec.h"
#include "framework/device/strategy.h"
#include "framework/model/model.h"
#include "framework/model/planner.h"

namespace keel::testing {

struct Case {
  std::string model;
  Shape input;  // without the batch
  DeviceSpec device;
  int64_t batch_per_core;
};

// The case's zoo model with 10 classes, compiled with Adam and categorical cross-entropy.
std::unique_ptr<Model> build_compiled(const Case& c);
// A host batch of `rows` random images and one-hot labels (rows < 0: the case's global batch), a
// function of `seed`.
Batch random_batch(const Case& c, uint64_t seed, int64_t rows = -1);

// What a run ends with: every variable's values, then every optimizer slot's, and each core's ledger.
struct TrainedState {
  std::vector<std::vector<float>> weights;
  std::vector<CoreMemory> memory;
};
TrainedState trained_state(Model& model, const Ledger& ledger);
// Expects b to hold a's weights and slots bit for bit and each core's peak, category peaks and bytes
// sent; `what` names b in the messages.
void expect_same_trained_state(const TrainedState& a, const TrainedState& b, const std::string& what);

// Deferred kernel gradients (KEEL_DEFERRED_KERNEL_GRADIENTS) on or off for the scope's lifetime; on
// again after it.
class DeferredKernelGradients {
 public:
  explicit DeferredKernelGradients(bool defer);
  ~DeferredKernelGradients();
  DeferredKernelGradients(const DeferredKernelGradients&) = delete;
  DeferredKernelGradients& operator=(const DeferredKernelGradients&) = delete;
};

}  // namespace keel::testing
