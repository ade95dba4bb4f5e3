// INTERNAL to the input pipeline (framework/data/ and the sources in datasets/): the node interfaces behind keel::Dataset and the helpers their iterators use
// to save and restore positions. Include it to write a new dataset op or source (e.g. a TFRecord
// reader) in its own file; users of the pipeline include framework/data/dataset.h only.
//
// A Dataset is an immutable chain of DatasetNodes; Dataset::make_iterator(k) asks the last node for
// an IteratorNode, which asks its input node for one, and so on. Contract for a source node (one
// without an input), which every op node follows too:
//
//   make_iterator(iteration)  A new iterator at the start of iteration `iteration` (the epoch, or a
//                             sub-iteration chosen by repeat()). The elements it yields must depend
//                             only on the node and `iteration` (never on time, threads or earlier
//                             iterators), so that restore() can reproduce them.
//   IteratorNode::save(out)   Appends the position as a few 64-bit words (indices, counts, seeds;
//                             never tensor data): cheap, because prefetch() snapshots it after every
//                             element it produces, on its producer thread.
//   state_json(words, at)     Turns the words saved by one of this node's iterators, read from
//                             words[at] on, into a JSON object {"op": "<name>", ...fields...,
//                             "input": <input's state, for an op>} and advances `at` past them.
//                             It runs on the node (no iterator), so the words must be
//                             self-describing; take_word()/take_int() read them.
//   IteratorNode::restore(s)  Given the JSON object state_json() made, moves a freshly made iterator
//                             (of the same node and iteration) to that position. Any field that is
//                             missing, of the wrong type, out of range or unreachable must end in
//                             state_mismatch() (a DataError); use state_field()/int_field()/
//                             uint_field(). Iterator::restore() builds a new tree and swaps it in
//                             only on success, so a failed restore leaves the old position intact.
//   cardinality()             Number of elements, kInfiniteCardinality or kUnknownCardinality.
//   describe()                One line naming the op and every parameter that changes the elements
//                             (not buffer sizes or thread counts: a state must resume under another
//                             thread count); an op appends " -> name(...)" to its input's. Saved
//                             states carry the whole pipeline's string and refuse to load into a
//                             different one.
//
// An IteratorNode is used by one thread at a time (its consumer): next(), save() and restore() are
// never called concurrently on the same iterator. After next() has returned nullopt it keeps
// returning nullopt. Iterators hold a reference to their DatasetNode, which must outlive them.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/core/host_threads.h"
#include "framework/data/data_error.h"
#include "framework/data/dataset.h"
#include "framework/core/random.h"

namespace keel {

// An iterator position in compact form: each node's fields followed by its input's, outermost node
// first. The DatasetNode that made the iterator turns it into the JSON state of Iterator::save().
using Position = std::vector<uint64_t>;

// ---- The row fast path ----------------------------------------------------------------------------
// from_tensor_slices' elements are rows of its components. An iterator whose elements are such rows,
// unchanged (from_tensor_slices itself, and take, skip or shuffle over one), names their source in
// row_source(), and its next_row() yields the next element's row index instead of the element: the
// same elements in the same order as next(), and the two may be mixed. batch() then copies the rows
// straight from the components into the batch, with no tensors per element (map-and-batch fusion's
// gather, in tf.data's terms). Only float32 components take it; the others go element by element.
class RowSource {
 public:
  virtual ~RowSource() = default;
  virtual Element row(int64_t i) const = 0;
  // The rows stacked along a new dim 0: what batch() makes of their elements.
  virtual Element gather(const std::vector<int64_t>& rows) const = 0;
};

class IteratorNode {
 public:
  virtual ~IteratorNode() = default;
  virtual std::optional<Element> next() = 0;
  virtual void save(Position& out) const = 0;  // appends this node's position
  virtual void restore(const nlohmann::json& state) = 0;
  // The row fast path (above): null for iterators that are not on it.
  virtual const RowSource* row_source() const { return nullptr; }
  virtual std::optional<int64_t> next_row() { throw std::logic_error("next_row() on an iterator without rows"); }
  // Map-and-batch fusion (tf.data's MapAndBatch; dataset_parallel.cc): an iterator that stacks its own
  // elements says so, and batch() then takes whole batches from next_batch: what batch(batch_size,
  // drop_remainder) would make of the next elements, with the same errors and the same saved states.
  virtual bool batches_itself() const { return false; }
  virtual std::optional<Element> next_batch(int64_t /*batch_size*/, bool /*drop_remainder*/) {
    throw std::logic_error("next_batch() on an iterator that does not batch itself");
  }
};

// Elements of equal structure stacked along a new dim 0 into host tensors, as batch() stacks them
// (dataset_batch.cc); a DataError names the first element that does not match element 0.
Element stack_elements(const std::vector<Element>& items);

class DatasetNode {
 public:
  virtual ~DatasetNode() = default;
  virtual std::unique_ptr<IteratorNode> make_iterator(uint64_t iteration) const = 0;
  virtual int64_t cardinality() const = 0;
  virtual std::string describe() const = 0;
  virtual nlohmann::json state_json(const Position& words, size_t& at) const = 0;
};

// batch(batch_size, drop_remainder) (dataset_batch.cc).
std::shared_ptr<const DatasetNode> make_batch_node(std::shared_ptr<const DatasetNode> input, int64_t batch_size,
                                                   bool drop_remainder);

// map(fn, num_parallel_calls) and map_with_key with threads (dataset_parallel.cc); keyed: map_with_key.
std::shared_ptr<const DatasetNode> make_parallel_map_node(std::shared_ptr<const DatasetNode> input, KeyedMapFunction fn,
                                                          int64_t num_parallel_calls, bool deterministic, bool keyed);

// ---- AUTOTUNE -------------------------------------------------------------------------------------
// The values AUTOTUNE stands for (the table is at AUTOTUNE in dataset.h). Parallel interleave also
// runs each open inner iterator up to max(block_length, 2) elements ahead.
inline constexpr int64_t kAutotunePrefetch = 2;
// Threads: this process's share of the machine's (under mpirun, divided among its processes here).
inline int64_t autotune_threads() { return host_threads(); }
// interleave's cycle length changes the element order, so it is the machine's core count alone,
// never the process count: every process of an mpirun job reads the order one process would.
inline int64_t autotune_cycle_length() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int64_t>(n);
}

// ---- Deterministic randomness ---------------------------------------------------------------------
// mix64 and SplitMix64 live in framework/core/random.h, the one definition every stream uses.

// ---- Saved-state parsing: every malformed or foreign state becomes one DataError ----------------

[[noreturn]] inline void state_mismatch(const std::string& why) {
  throw DataError("iterator state does not match this dataset pipeline: " + why +
                  ". Restore a state saved by an iterator of this same dataset (same ops and parameters) "
                  "made with the same iteration.");
}

// state[key] of a state whose "op" must be `op`.
inline const nlohmann::json& state_field(const nlohmann::json& state, const char* op, const char* key) {
  if (!state.is_object()) state_mismatch(std::string("expected a JSON object for '") + op + "'");
  const auto it_op = state.find("op");
  if (it_op == state.end() || !it_op->is_string() || it_op->get<std::string>() != op) {
    state_mismatch(std::string("expected a '") + op + "' state, found " +
                   (it_op == state.end() ? std::string("none") : it_op->dump()));
  }
  const auto it = state.find(key);
  if (it == state.end()) state_mismatch(std::string("'") + op + "' state has no '" + key + "'");
  return *it;
}

// state[key] as an integer in [lo, hi].
inline int64_t int_field(const nlohmann::json& state, const char* op, const char* key, int64_t lo, int64_t hi) {
  const nlohmann::json& v = state_field(state, op, key);
  const bool fits = v.is_number_integer() &&
                    (!v.is_number_unsigned() ||
                     v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
  const int64_t x = fits ? v.get<int64_t>() : 0;
  if (!fits || x < lo || x > hi) {
    state_mismatch(std::string("'") + op + "." + key + "' is " + v.dump() + ", outside [" +
                   std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return x;
}

// `v` as a non-negative integer; `what` names it in the error.
inline uint64_t uint_field(const nlohmann::json& v, const std::string& what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  state_mismatch("'" + what + "' is " + v.dump() + ", not a non-negative integer");
}

// Readers for state_json(). A position shorter than its pipeline is a bug in a node (std::logic_error),
// except where the words come from a saved state (interleave's inner positions), which catch it.
inline uint64_t take_word(const Position& words, size_t& at) {
  if (at >= words.size()) throw std::logic_error("dataset iterator position is shorter than its pipeline");
  return words[at++];
}
inline int64_t take_int(const Position& words, size_t& at) { return static_cast<int64_t>(take_word(words, at)); }

// The JSON state of `node`'s iterator `it` as it is now.
inline nlohmann::json current_state(const DatasetNode& node, const IteratorNode& it) {
  Position words;
  it.save(words);
  size_t at = 0;
  nlohmann::json state = node.state_json(words, at);
  if (at != words.size()) throw std::logic_error("dataset iterator position is longer than its pipeline");
  return state;
}

}  // namespace keel
