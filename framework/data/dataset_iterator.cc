// Iterator: the public handle on an iterator tree, and the versioned JSON state it saves and restores.
#include <memory>
#include <stdexcept>
#include <string>

#include "framework/data/dataset.h"
#include "framework/data/dataset_node.h"

namespace keel {

using nlohmann::json;

namespace {

constexpr const char* kStateFormat = "keel.dataset_iterator";
constexpr int kStateVersion = 1;

}  // namespace

// ---- Iterator --------------------------------------------------------------------------------------

Iterator::Iterator(std::shared_ptr<const DatasetNode> root, uint64_t iteration)
    : root_(std::move(root)), node_(root_->make_iterator(iteration)), iteration_(iteration) {}
Iterator::Iterator(Iterator&&) noexcept = default;
Iterator& Iterator::operator=(Iterator&& other) noexcept {
  // node_ points into root_: release the old tree before the graph that backs it.
  node_ = std::move(other.node_);
  root_ = std::move(other.root_);
  iteration_ = other.iteration_;
  produced_ = other.produced_;
  return *this;
}
Iterator::~Iterator() { node_.reset(); }

std::optional<Element> Iterator::next() {
  std::optional<Element> e = node_->next();
  if (e) ++produced_;
  return e;
}

json Iterator::save() const {
  return {{"format", kStateFormat},  {"version", kStateVersion}, {"pipeline", root_->describe()},
          {"iteration", iteration_}, {"produced", produced_},    {"state", current_state(*root_, *node_)}};
}

Iterator::Snapshot Iterator::snapshot() const {
  Snapshot s;
  s.root = root_.get();
  s.iteration = iteration_;
  s.produced = produced_;
  node_->save(s.words);
  return s;
}

json Iterator::save(const Snapshot& snapshot) const {
  if (snapshot.root == nullptr) throw std::invalid_argument("Iterator::save: an empty snapshot");
  if (snapshot.root != root_.get() || snapshot.iteration != iteration_) {
    throw std::invalid_argument("Iterator::save: the snapshot was taken from another dataset or iteration");
  }
  size_t at = 0;
  json state = root_->state_json(snapshot.words, at);
  if (at != snapshot.words.size()) throw std::logic_error("dataset iterator position is longer than its pipeline");
  return {{"format", kStateFormat},  {"version", kStateVersion}, {"pipeline", root_->describe()},
          {"iteration", iteration_}, {"produced", snapshot.produced}, {"state", std::move(state)}};
}

void Iterator::restore(const json& state) {
  if (!state.is_object() || state.value("format", json()) != kStateFormat) {
    state_mismatch("not a keel dataset iterator state (no \"format\": \"" + std::string(kStateFormat) +
                   "\")");
  }
  if (state.value("version", json()) != kStateVersion) {
    state_mismatch("state version " + state.value("version", json()).dump() + ", this build reads version " +
                   std::to_string(kStateVersion));
  }
  const std::string pipeline = root_->describe();
  const json saved_pipeline = state.value("pipeline", json());
  if (saved_pipeline != pipeline) {
    state_mismatch("it was saved from pipeline " + saved_pipeline.dump() + " but this dataset is \"" +
                   pipeline + "\"");
  }
  const uint64_t saved_iteration = uint_field(state.value("iteration", json()), "iteration");
  if (saved_iteration != iteration_) {
    state_mismatch("it was saved at iteration " + std::to_string(saved_iteration) +
                   " but this iterator was made for iteration " + std::to_string(iteration_));
  }
  const uint64_t produced = uint_field(state.value("produced", json()), "produced");
  if (!state.contains("state")) state_mismatch("it has no \"state\"");
  // Restore into a new tree so that a state that fails half-way leaves this iterator untouched.
  std::unique_ptr<IteratorNode> fresh = root_->make_iterator(iteration_);
  fresh->restore(state["state"]);
  node_ = std::move(fresh);
  produced_ = static_cast<int64_t>(produced);
}

}  // namespace keel
