#include "framework/device/replica_context.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>

#include "framework/core/fiber_locals.h"
#include "framework/core/random.h"
#include "framework/device/strategy.h"

namespace keel {
namespace {

thread_local ReplicaContext* tls_replica_context = nullptr;
ReplicaContext*& replica_context_of_thread() { return tls_replica_context; }
const FiberLocal<ReplicaContext*, replica_context_of_thread> kReplicaContextFollowsTheReplica;
std::atomic<uint64_t> g_replica_local_states{0};
std::atomic<int64_t> g_live_states{0};

}  // namespace

ReplicaLocalState::ReplicaLocalState() : creation_order_(g_replica_local_states.fetch_add(1)) { g_live_states.fetch_add(1); }

ReplicaLocalState::ReplicaLocalState(const ReplicaLocalState&) : ReplicaLocalState() {}

ReplicaLocalState::~ReplicaLocalState() { g_live_states.fetch_sub(1); }

int64_t ReplicaLocalState::live() { return g_live_states.load(); }

ReplicaContext::ReplicaContext(ReplicatedStrategy& strategy, Collectives* collectives, int replica_id,
                               int num_replicas, int64_t step)
    : strategy_(strategy), collectives_(collectives), replica_id_(replica_id), num_replicas_(num_replicas), step_(step) {}

uint64_t ReplicaContext::random_key(uint64_t op_key) const {
  return combine_keys(op_key, combine_keys(static_cast<uint64_t>(step_), static_cast<uint64_t>(replica_id_)));
}

Collectives& ReplicaContext::collectives() const {
  if (collectives_ == nullptr) {
    throw std::logic_error("a cross-replica operation was called where replicas may not wait for each other "
                           "(ReplicatedStrategy::for_each_replica); call it inside strategy.run");
  }
  return *collectives_;
}

bool ReplicaContext::leads_process() const { return replica_id_ == strategy_.first_local_replica(); }

void ReplicaContext::merge_call(const std::function<void()>& fn) const {
  if (num_replicas_ > 1) barrier();
  if (leads_process()) {
    ContextScope mirrored(strategy_.mirrored_context());
    fn();
  }
  if (num_replicas_ > 1) barrier();
}

void ReplicaContext::mark_for_sync(ReplicaLocalState* state) {
  if (collectives_ == nullptr) {
    throw std::logic_error("replica-local state was updated where replicas cannot combine it "
                           "(ReplicatedStrategy::for_each_replica); train inside strategy.run");
  }
  if (!strategy_.syncs_local_state()) {
    throw std::logic_error("replica-local state (a BatchNormalization layer) created inside strategy.run was updated in "
                           "the same run, which cannot combine it: create the layer before running it");
  }
  if (std::find(marked_.begin(), marked_.end(), state) == marked_.end()) marked_.push_back(state);
}

void ReplicaContext::defer(const Tensor& value, std::shared_ptr<const DeferredProduct> product) {
  if (!deferral_allowed_) throw std::logic_error("ReplicaContext::defer: this step computes its gradients whole");
  deferred_.emplace_back(value.storage().id(), std::move(product));
}

void ReplicaContext::materialize(const Tensor& value) {
  if (deferred_.empty() || !value.defined() || value.is_abstract()) return;
  const uint64_t id = value.storage().id();
  auto it = std::find_if(deferred_.begin(), deferred_.end(), [&](const auto& d) { return d.first == id; });
  if (it == deferred_.end()) return;
  const std::shared_ptr<const DeferredProduct> product = std::move(it->second);
  deferred_.erase(it);
  Tensor target = value;
  product->compute_rows(0, product->rows, target.data());
}

std::vector<const DeferredProduct*> ReplicaContext::deferred_products(std::span<const Tensor> values) const {
  std::vector<const DeferredProduct*> out;
  if (deferred_.empty()) return out;
  out.resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (!values[i].defined() || values[i].is_abstract()) continue;
    const uint64_t id = values[i].storage().id();
    for (const auto& [storage, product] : deferred_) {
      if (storage == id) out[i] = product.get();
    }
  }
  return out;
}

ReplicaContext* current_replica_context() { return tls_replica_context; }

ReplicaContextScope::ReplicaContextScope(ReplicaContext* ctx) : saved_(tls_replica_context) { tls_replica_context = ctx; }

ReplicaContextScope::~ReplicaContextScope() { tls_replica_context = saved_; }

}  // namespace keel
