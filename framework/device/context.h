// Where the tensors a thread creates live, and how they are charged.
//
// Every thread has a DeviceContext. The host thread starts with no ledger (host RAM, uncharged).
// ReplicatedStrategy::scope() makes new tensors mirrored (charged on every core);
// ReplicatedStrategy::run() puts each replica thread on its own core. A context can be *abstract*:
// tensors then have shapes and ledger charges but no storage, which is how the planner runs a real
// step without the memory.
#pragma once

#include <string>

#include "framework/core/shape.h"

namespace keel {

class Ledger;
class ReplicatedStrategy;

struct DeviceContext {
  Ledger* ledger = nullptr;                  // nullptr: host memory, not charged
  ReplicatedStrategy* strategy = nullptr;    // the strategy whose scope this is, if any
  int core = -1;                             // with a ledger: the core; -1 = mirrored on every core
  bool sharded = false;                      // with core -1: each core is charged only its shard of a new
                                             // buffer (framework/device/sharding.h), not a whole copy
  int shard_axis = -1;                       // with core -1, >= 0: each core is charged only its block of
                                             // that axis of a new buffer (a LayoutMap's, device/layout.h)
  bool abstract = false;                     // shape-only tensors
  Category category = Category::activations; // default category for new tensors
  std::string owner;                         // default owner name for new tensors
};

DeviceContext& device_context();  // this thread's

// RAII: replaces this thread's context, restores the previous one on destruction.
class ContextScope {
 public:
  explicit ContextScope(DeviceContext ctx) : saved_(device_context()) { device_context() = std::move(ctx); }
  ~ContextScope() { device_context() = std::move(saved_); }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  DeviceContext saved_;
};

// RAII: changes the default category (and optionally owner) of new tensors on this thread.
class CategoryScope {
 public:
  explicit CategoryScope(Category category) : saved_cat_(device_context().category), saved_owner_(device_context().owner) {
    device_context().category = category;
  }
  CategoryScope(Category category, std::string owner) : CategoryScope(category) {
    device_context().owner = std::move(owner);
  }
  ~CategoryScope() {
    device_context().category = saved_cat_;
    device_context().owner = std::move(saved_owner_);
  }
  CategoryScope(const CategoryScope&) = delete;
  CategoryScope& operator=(const CategoryScope&) = delete;

 private:
  Category saved_cat_;
  std::string saved_owner_;
};

// RAII: changes only the default owner name.
class OwnerScope {
 public:
  explicit OwnerScope(std::string owner) : saved_(device_context().owner) { device_context().owner = std::move(owner); }
  ~OwnerScope() { device_context().owner = std::move(saved_); }
  OwnerScope(const OwnerScope&) = delete;
  OwnerScope& operator=(const OwnerScope&) = delete;

 private:
  std::string saved_;
};

// RAII: new tensors on this thread live in host memory (datasets, metrics, checkpoint I/O).
class HostScope : public ContextScope {
 public:
  HostScope() : ContextScope(DeviceContext{}) {}
};

}  // namespace keel
