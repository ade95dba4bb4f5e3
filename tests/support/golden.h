// Golden values from an independent implementation (PyTorch), stored as JSON in tests/golden/:
// tensors are {"shape": [...], "values": [flat, row-major]}.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "framework/core/tensor.h"

namespace keel::testing {

// tests/golden/<file>, parsed once per file; std::runtime_error if it cannot be read.
const nlohmann::json& load_golden(const std::string& file);
// A host tensor from a golden {"shape", "values"} object.
Tensor tensor_of(const nlohmann::json& t);
// Every element within `rel` relative, with an absolute floor of `rel` times the tensor's largest
// value (for elements that are sums cancelling to near 0); reports the worst element.
void expect_matches_golden(const Tensor& got, const nlohmann::json& want, const std::string& what, double rel = 1e-5);

// The generator the golden scripts share (bench/golden_resnet.py: fnv1a64, splitmix64, generate), so
// that weights and batches are formulas of a name rather than stored values.
uint64_t fnv1a64(std::string_view text);
// The i-th output (i = 0, 1, ...) of SplitMix64 seeded with key.
uint64_t splitmix64(uint64_t key, uint64_t i);
struct Range {
  double center, half;  // both float32 numbers, so half * t is exact in double
};
// Element i = float32(center + half * t_i), t_i = ((splitmix64(fnv1a64(key), i) >> 40) * 2 - 2^24) / 2^24.
Tensor generate(const std::string& key, const Shape& shape, Range r);

}  // namespace keel::testing
