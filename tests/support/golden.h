// Golden values from an independent implementation (PyTorch), stored as JSON in tests/golden/:
// tensors are {"shape": [...], "values": [flat, row-major]}.
#pragma once

#include <string>

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

}  // namespace keel::testing
