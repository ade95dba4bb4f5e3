// A tf.data-style input pipeline on host memory, with exactly resumable iterators.
//
//   Dataset ds = Dataset::from_tensor_slices({images, labels})   // images (N, 28, 28), labels (N,)
//                    .shuffle(1024, /*seed=*/7)
//                    .batch(128, /*drop_remainder=*/true)          // elements {(128, 28, 28), (128,)}
//                    .prefetch(AUTOTUNE);
//   for (int64_t epoch = 0; ...) {
//     Iterator it = ds.make_iterator(epoch);                     // a new shuffle order per epoch
//     while (auto batch = it.next()) { ... }
//   }
//
// A Dataset is an immutable description (a chain of nodes shared by copies); an Iterator walks it.
// All tensors the pipeline creates live in host memory (HostScope), whatever the caller's context.
//
// Determinism: an iterator's element sequence depends only on the pipeline and the `iteration` given
// to make_iterator, never on timing, threads or the platform (the shuffle RNG is SplitMix64 with
// Lemire's bounded integers, written out in dataset_node.h) — the one opt-out is
// map(fn, n, /*deterministic=*/false). Map, filter, interleave and generator functions must be
// deterministic and free of side effects that matter: restore() replays them.
//
// Resume: Iterator::save() returns a small JSON state (positions, counts, seeds — never tensor data);
// make_iterator(same iteration) + restore(state) continues with exactly the elements the saved
// iterator would have produced next. Costs: a shuffle regenerates its buffer by replaying its input
// from the start of the iteration up to the saved position (about as costly as producing that many
// elements again, map functions included); so do from_generator (its generator), interleave (its
// input, plus fn for each open slot) and a half-filled cache (its input); a cache that was complete
// when saved is refilled, in a fresh process, by one pass over its input. Everything else restores in
// O(1) (plus the cost of restoring its input). Parallel ops (map with num_parallel_calls, interleave
// with num_parallel_calls, prefetch) save exactly what their sequential forms would, so a state
// resumes under any thread count (map with deterministic = false has its own exact state).
//
// An Iterator is used from one thread at a time; prefetch(), parallel map() and parallel interleave()
// run threads of their own internally, which the Iterator's destructor stops and joins.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/core/tensor.h"

namespace keel {

// One element of a dataset: its components, e.g. {image (28, 28), label ()}.
using Element = std::vector<Tensor>;

// AUTOTUNE (tf.data.AUTOTUNE) picks, in every op that takes it (constants in dataset_node.h):
//   prefetch(AUTOTUNE)                       a buffer of 2 elements
//   map(fn, AUTOTUNE)                        host_threads() threads: hardware_concurrency(), divided
//                                            under mpirun among the processes on this machine, at
//                                            most the CPUs the process may run on (and,
//                                            as for any thread count, 4 elements in flight per thread)
//   interleave(fn, cycle_length = AUTOTUNE)  hardware_concurrency() open inner iterators; this changes
//                                            the element order, so it is part of describe() and a
//                                            state saved on a machine with another core count is refused
//   interleave(..., num_parallel_calls = AUTOTUNE)  min(cycle_length, host_threads()) threads
// Thread counts and buffer sizes never change the elements or their order (but see map's
// deterministic = false).
inline constexpr int64_t AUTOTUNE = -1;
// cardinality() values, as tf.data.INFINITE_CARDINALITY / UNKNOWN_CARDINALITY.
inline constexpr int64_t kInfiniteCardinality = -1;
inline constexpr int64_t kUnknownCardinality = -2;

class DatasetNode;
class IteratorNode;
class Dataset;

// Where an element stands, for map_with_key(): the iteration its iterator was made for (the epoch, or
// the sub-iteration repeat() gives) and its index among the elements the map's input yields in that
// iteration (0, 1, 2, ...). A function of the pipeline and the iteration alone, like the elements.
struct ElementKey {
  uint64_t iteration = 0;
  int64_t index = 0;
};
using KeyedMapFunction = std::function<Element(const Element&, const ElementKey&)>;

// A generator for Dataset::from_generator: each call returns the next element, nullopt at the end.
using Generator = std::function<std::optional<Element>()>;

class Iterator {
 public:
  Iterator(Iterator&&) noexcept;
  Iterator& operator=(Iterator&&) noexcept;
  ~Iterator();  // stops and joins any prefetch threads

  // The next element, or nullopt at the end (and on every call after it). An exception thrown
  // upstream (a map function, a prefetch producer) is re-thrown here.
  std::optional<Element> next();

  // The position as seen by the caller (elements prefetched but not yet returned are not counted):
  //   {"format": "keel.dataset_iterator", "version": 1, "pipeline": "<describe()>",
  //    "iteration": k, "produced": n, "state": {"op": ..., "input": {...}, ...}}
  nlohmann::json save() const;
  // The position right now in compact form (a few words, no JSON, no tensors): cheap enough to take
  // after every element, e.g. to checkpoint the position of the last batch trained on while the
  // iterator has already run ahead. save(snapshot) is the state save() would have returned then.
  class Snapshot {
   public:
    Snapshot() = default;

   private:
    friend class Iterator;
    const DatasetNode* root = nullptr;  // null: default-constructed
    uint64_t iteration = 0;
    int64_t produced = 0;
    std::vector<uint64_t> words;
  };
  Snapshot snapshot() const;
  // Throws std::invalid_argument for a default-constructed snapshot or one of another dataset or
  // iteration.
  nlohmann::json save(const Snapshot& snapshot) const;

  // Moves this iterator to a saved position; works before or after next() calls. Throws DataError
  // ("iterator state does not match this dataset pipeline ...") if the state was saved from another
  // pipeline or iteration, or is malformed.
  void restore(const nlohmann::json& state);

  int64_t produced() const { return produced_; }  // elements returned so far
  uint64_t iteration() const { return iteration_; }

 private:
  friend class Dataset;
  Iterator(std::shared_ptr<const DatasetNode> root, uint64_t iteration);

  std::shared_ptr<const DatasetNode> root_;  // declared first: outlives node_, which points into it
  std::unique_ptr<IteratorNode> node_;
  uint64_t iteration_ = 0;
  int64_t produced_ = 0;
};

class Dataset {
 public:
  // Elements are the rows of `components` (sliced along dim 0, which all components must share);
  // element i has component c of shape components[c].shape() without dim 0. Elements are views of
  // the given tensors (no copy), which must not be modified while the dataset is in use.
  static Dataset from_tensor_slices(std::vector<Tensor> components);

  // tf.data's from_generator: make(iteration) is called once per iterator and returns the generator
  // that iterator pulls from. Both must be deterministic (the generator's sequence a function of
  // `iteration` alone): restore() to position n calls make(iteration) and then the generator n
  // times, so resuming costs as much as producing those n elements again. Cardinality is unknown.
  // describe() is "from_generator": the saved-state check cannot tell two generators apart.
  static Dataset from_generator(std::function<Generator(uint64_t iteration)> make);

  // tf.data's list_files: the paths matching the POSIX glob(3) patterns, as string scalar tensors
  // (one component), sorted and without duplicates. The patterns are expanded here, once. With
  // `shuffle` the order is a uniform permutation drawn anew for each iteration from (seed,
  // iteration) — without a seed the seed is 0, so the order is still reproducible (tf picks a random
  // seed). Throws DataError ("list_files: no files match ...") when no file matches any pattern.
  // Several patterns: pass a std::vector<std::string> explicitly.
  static Dataset list_files(const std::vector<std::string>& patterns, bool shuffle = true,
                            std::optional<uint64_t> seed = {});
  static Dataset list_files(const std::string& pattern, bool shuffle = true, std::optional<uint64_t> seed = {});

  // For sources and ops written in other files against framework/data/dataset_node.h (internal).
  static Dataset from_node(std::shared_ptr<const DatasetNode> node);
  const std::shared_ptr<const DatasetNode>& node() const { return node_; }

  // `fn` runs in a HostScope on the thread that pulls the element (a prefetch thread if one is
  // downstream). It must be deterministic: iterator restore replays it.
  Dataset map(std::function<Element(const Element&)> fn) const;

  // Parallel map: fn runs on `num_parallel_calls` threads of the iterator's own (AUTOTUNE: one per
  // core), in a HostScope, with up to 4 * num_parallel_calls elements in flight; the input is pulled on
  // the consumer's thread. deterministic: elements come out in input order, and the saved state is
  // the sequential map's (it resumes under any thread count, or with map(fn)). deterministic =
  // false (tf.data's semantics): next() returns the oldest element whose fn has finished, so the order
  // depends on timing; the input is read at most 4 * num_parallel_calls elements past the oldest
  // unreturned one. Its state (input position at that oldest element plus the indices returned
  // beyond it) is still exact: a restored iterator returns exactly the elements not yet returned,
  // each once. An exception from fn is re-thrown by next() in that element's place; the next call
  // continues with the following elements, as with the sequential map. num_parallel_calls = 0 is
  // map(fn).
  Dataset map(std::function<Element(const Element&)> fn, int64_t num_parallel_calls,
              bool deterministic = true) const;

  // map() whose function also gets the element's key, for stateless random transforms (augmentation,
  // datasets/preprocessing.h): randomness drawn from (seed, key.iteration, key.index) is the same under
  // any thread count and after a restore. Sequential (num_parallel_calls = 0) or parallel, as map();
  // deterministic forms save the same state, the map's plus the index ("index"), so each resumes
  // under the other. describe() says "map(keyed)".
  Dataset map_with_key(KeyedMapFunction fn, int64_t num_parallel_calls = 0, bool deterministic = true) const;

  // The elements for which predicate (run in a HostScope) is true. Cardinality: unknown.
  Dataset filter(std::function<bool(const Element&)> predicate) const;

  // All but the first `count` elements; count = -1 skips them all (tf.data).
  Dataset skip(int64_t count) const;

  // tf.data's in-memory cache(): the first iterator that runs to the end, of whatever iteration k,
  // fills the cache, and every iterator made afterwards, of any iteration, reads those elements
  // (tensors shared with the cache: do not modify them). An iterator abandoned before its end
  // discards what it had gathered. A saved state records k, so a fresh process refills the cache by
  // replaying iteration k of the input once (cost: one pass over the input). Restoring a
  // half-filling iterator replays its input up to the saved position.
  Dataset cache() const;

  // tf.data's interleave: keeps cycle_length inner iterators open, each made by fn from one input
  // element (fn(e).make_iterator(iteration)), and takes block_length elements from each in turn;
  // an exhausted one is replaced, when the cycle next reaches its slot, by an iterator over the next
  // input element. cycle_length = AUTOTUNE: one per core (see AUTOTUNE). With num_parallel_calls > 0
  // or AUTOTUNE, worker threads advance the open inner iterators ahead of the consumer; the order is
  // always the sequential one (deterministic = false is accepted and ignored). fn runs on the
  // consumer's thread in a HostScope and must be deterministic: restore() replays the input up to
  // the saved position and calls fn again for the open slots. An exception from an inner iterator or
  // fn ends the iterator: next() re-throws it, then and on every later call. Cardinality: unknown.
  Dataset interleave(std::function<Dataset(const Element&)> fn, int64_t cycle_length = AUTOTUNE,
                     int64_t block_length = 1, int64_t num_parallel_calls = 0,
                     bool deterministic = true) const;

  // tf.data's shuffle: keeps a buffer of `buffer_size` elements, emits a uniformly random one and
  // refills its slot from the input. The order of iteration k is a function of (seed, k) when
  // reshuffle_each_iteration, of seed alone otherwise. buffer_size >= cardinality gives a uniform
  // permutation.
  Dataset shuffle(int64_t buffer_size, uint64_t seed, bool reshuffle_each_iteration = true) const;

  // Stacks `batch_size` consecutive elements along a new dim 0 into new host tensors: component
  // shape S becomes (batch_size, S...). The last batch is smaller unless drop_remainder. All elements
  // of a batch must have equal component shapes (DataError otherwise).
  Dataset batch(int64_t batch_size, bool drop_remainder = false) const;

  // count = -1 repeats forever. Repetition r of iteration k iterates its input as sub-iteration
  // k * count + r (finite count) or k * 2^32 + r (forever), so every repetition is shuffled anew
  // and reproducibly. Repeating an empty dataset forever yields nothing (it does not hang).
  Dataset repeat(int64_t count = -1) const;

  // At most `count` elements; -1 takes all.
  Dataset take(int64_t count) const;

  // Produces up to `buffer_size` elements ahead on a background thread (AUTOTUNE = 2). The element
  // sequence is unchanged. Each element costs a thread hand-off and a snapshot of the upstream
  // position (a few words), so prefetch batches rather than single examples where possible.
  Dataset prefetch(int64_t buffer_size) const;

  // Number of elements, or kInfiniteCardinality (-1) / kUnknownCardinality (-2).
  int64_t cardinality() const;

  // The pipeline, e.g. "from_tensor_slices(n=60000, shapes=[(28, 28), ()]) -> shuffle(buffer=64,
  // seed=7, reshuffle=true) -> batch(8, drop_remainder=true) -> prefetch". Saved states carry it.
  std::string describe() const;

  // `iteration` is the epoch index (see shuffle and repeat).
  Iterator make_iterator(uint64_t iteration = 0) const;

 private:
  explicit Dataset(std::shared_ptr<const DatasetNode> node) : node_(std::move(node)) {}
  std::shared_ptr<const DatasetNode> node_;
};

}  // namespace keel
