// Keras's dtype policies (keras.mixed_precision): what a layer computes in and what its variables are.
//
//   keel::mixed_precision::set_global_policy("mixed_bfloat16");   // before building the model
//   auto model = keel::models::resnet50(...);                     // every layer computes in bfloat16
//   head->set_dtype_policy(keel::mixed_precision::Policy("float32"));  // one layer's own policy
//
// "float32": everything float32. "mixed_bfloat16": variables (and so gradients and optimizer slots)
// stay float32; the layer's ops compute on bfloat16-rounded inputs and weights with float32
// accumulation and store their outputs — the activations kept for backward included — as 2-byte
// bfloat16 (framework/ops/precision.h). A model's outputs are always float32, and softmax and the
// losses run in float32, as Keras advises. As in Keras, a layer takes the global policy in force when
// it is constructed.
#pragma once

#include <string>

#include "framework/core/dtype.h"

namespace keel::mixed_precision {

class Policy {
 public:
  // "float32" or "mixed_bfloat16"; anything else is std::invalid_argument naming the ones there are.
  explicit Policy(const std::string& name = "float32");
  const std::string& name() const { return name_; }
  DType compute_dtype() const { return compute_; }
  DType variable_dtype() const { return DType::float32; }
  bool operator==(const Policy& other) const { return name_ == other.name_; }

 private:
  std::string name_;
  DType compute_ = DType::float32;
};

// The process's policy for layers constructed from now on ("float32" until set).
void set_global_policy(const Policy& policy);
void set_global_policy(const std::string& name);
Policy global_policy();

// RAII: sets the global policy, and restores the previous one when it goes.
class GlobalPolicyScope {
 public:
  explicit GlobalPolicyScope(const Policy& policy);
  ~GlobalPolicyScope();
  GlobalPolicyScope(const GlobalPolicyScope&) = delete;
  GlobalPolicyScope& operator=(const GlobalPolicyScope&) = delete;

 private:
  Policy saved_;
};

}  // namespace keel::mixed_precision
