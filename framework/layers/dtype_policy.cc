#include "framework/layers/dtype_policy.h"

#include <mutex>
#include <stdexcept>

namespace keel::mixed_precision {
namespace {

std::mutex g_policy_mu;
Policy& global() {
  static Policy policy("float32");
  return policy;
}

}  // namespace

Policy::Policy(const std::string& name) : name_(name) {
  if (name == "mixed_bfloat16") {
    compute_ = DType::bfloat16;
  } else if (name != "float32") {
    throw std::invalid_argument("unknown dtype policy '" + name.substr(0, 64) +
                                "': keel has float32 and mixed_bfloat16 (mixed_float16 and bfloat16 "
                                "variables are not supported)");
  }
}

void set_global_policy(const Policy& policy) {
  std::lock_guard<std::mutex> lock(g_policy_mu);
  global() = policy;
}

void set_global_policy(const std::string& name) { set_global_policy(Policy(name)); }

Policy global_policy() {
  std::lock_guard<std::mutex> lock(g_policy_mu);
  return global();
}

GlobalPolicyScope::GlobalPolicyScope(const Policy& policy) : saved_(global_policy()) { set_global_policy(policy); }
GlobalPolicyScope::~GlobalPolicyScope() { set_global_policy(saved_); }

}  // namespace keel::mixed_precision
