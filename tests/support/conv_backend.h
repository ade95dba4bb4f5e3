// Test support for conv2d's two kernels (framework/ops/conv.h): a scope that runs convolutions on one
// backend, and the backends to loop over.
//
//   for (ops::ConvBackend b : kConvBackends) { const ConvBackendScope backend(b); ... }
#pragma once

#include "framework/ops/conv.h"

namespace keel::testing {

// Runs conv2d's convolutions on one backend for the scope's lifetime.
class ConvBackendScope {
 public:
  explicit ConvBackendScope(ops::ConvBackend backend) : saved_(ops::conv_backend()) { ops::set_conv_backend(backend); }
  ~ConvBackendScope() { ops::set_conv_backend(saved_); }
  ConvBackendScope(const ConvBackendScope&) = delete;
  ConvBackendScope& operator=(const ConvBackendScope&) = delete;

 private:
  ops::ConvBackend saved_;
};

inline constexpr ops::ConvBackend kConvBackends[] = {ops::ConvBackend::onednn, ops::ConvBackend::im2col};
inline const char* conv_backend_name(ops::ConvBackend b) { return b == ops::ConvBackend::onednn ? "onednn" : "im2col"; }

}  // namespace keel::testing
