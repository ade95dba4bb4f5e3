// A zoo model trained on random batches, for the tests that compare two ways of running the same
// steps bit for bit (tests/model/savers_test.cc, tests/model/layout_test.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "framework/device/device_spec.h"
#include "framework/device/strategy.h"
#include "framework/model/model.h"

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

}  // namespace keel::testing
