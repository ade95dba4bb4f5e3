// Collectives: every byte that moves between replicas goes through this interface (TensorFlow's
// cross-device ops, MPI's collectives): all_reduce, reduce_scatter, all_gather, broadcast, barrier.
//
// Contract of every operation: it is called by every replica of one strategy.run, in the same order,
// with tensors of the same shapes (all_gather: same trailing dims); a replica that does not take
// part deadlocks the others, a mismatch throws std::logic_error. The order in which values are
// summed is fixed by the topology (ReductionTree below: global replica ids alone), never by
// scheduling, thread count or, in a multi-process backend, how replicas are spread over processes,
// so every result is bit-identical across all of them.
//
// Device model: each operation counts, per core, the bytes it sends to and receives from other cores
// as a tree-shaped exchange would move them (TransferStat::sent_bytes / received_bytes), and charges
// its temporaries as `workspace`: a core that receives partial sums from children (all_reduce,
// reduce_scatter) holds a receive buffer of the largest tensor while the operation runs. Outputs that
// an operation creates (reduce_scatter's shard, all_gather's result) are charged like any tensor the
// replica creates (its core, the current category).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "framework/core/tensor.h"
#include "framework/device/deferred_product.h"

namespace keel {

class Ledger;

enum class ReduceOp { Sum, Mean };

// The topology of every reduction: a binomial tree over global replica ids, rooted at 0. Replica
// r's children are r + 2^k for each k with r mod 2^(k+1) == 0 and r + 2^k < n, in increasing k; its
// parent is r with its lowest set bit cleared. Each node's sum is own + child_1 + child_2 + ... in
// that order, so for 8 replicas the result is ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7)).
// A block of 2^k consecutive replicas starting at a multiple of 2^k is a subtree, which is what lets
// a multi-process backend reduce inside each process first and still produce the same sums.
struct ReductionTree {
  static int parent(int replica);  // -1 for the root
  static std::vector<int> children(int replica, int num_replicas);
  // The replicas of `replica`'s subtree are [replica, subtree_end).
  static int subtree_end(int replica, int num_replicas);
};

// out[i] = the tree-ordered sum of in[0][i], ..., in[n-1][i] for i < count. `out` may alias in[0].
// Elementwise: splitting [0, count) into ranges computed by different threads gives the same bits.
void tree_sum(std::span<const float* const> in, float* out, int64_t count);
// tree_sum, each sum then divided by `divisor` (> 1: a mean; the same bits as dividing out afterwards),
// in one pass while each chunk is in cache; returns the index of the first element of out that is
// not finite (NaN or infinite), count if none.
int64_t tree_mean_checked(std::span<const float* const> in, float* out, int64_t count, int divisor);
// Both: divided when divisor > 1; with `check`, returns the first non-finite element of out (count if
// none), else count (framework/device/tree_sum.cc).
int64_t tree_sum_into(std::span<const float* const> in, float* out, int64_t count, int divisor, bool check);

// Replica r's share [begin, end) of `elements` split over n replicas as evenly as possible, the first
// (elements mod n) replicas taking one more (the split infeed uses for batches).
struct ShardRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};
ShardRange shard_range(int64_t elements, int num_replicas, int replica);
// The union of the shards of each block of `replicas_per_process` consecutive replicas: what each
// process of a slice shared by several holds of a sharded tensor (consecutive, covering all).
std::vector<ShardRange> process_shard_ranges(int64_t elements, int num_replicas, int replicas_per_process);

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int num_replicas() const = 0;

  // Every replica's `values` become the elementwise sum (or mean) over replicas, in place.
  // Undefined tensors are skipped (every replica must leave the same ones undefined).
  virtual void all_reduce(int replica, ReduceOp op, std::span<Tensor> values) = 0;
  // The optimizer's reduction of the gradients it updates from (Optimizer::apply_gradients): the
  // reduction of all_reduce, but each replica reads the result only where it updates, its shard of
  // each tensor — of the slice (elements shard_range(size, num_replicas(), replica)) with
  // `slice_shards`, else of its process (shard_range(size, L, k) for the local replica k of L) — and
  // what its tensors hold afterwards is unspecified: no result is copied to every replica. Returns the
  // index in `values` of the first tensor whose result holds a NaN or an infinity (values.size() if
  // none), the same on every replica: the vote on applying a step, at no extra meeting (each replica
  // checks the elements it reduced before the last barrier). results[i] (one per value) is where the
  // result of values[i] is, element k at results[i][k] for k in the replica's shard: the sum itself,
  // read in place — in a buffer of this process's collectives that its replicas share, or where the
  // processes of a slice share memory, in that memory — or, across processes without it,
  // values[i].data() where it was copied; valid until a replica of this process calls another
  // collective that moves tensors (barrier and all_reduce_min move none; the optimizer's replicas
  // meet at a barrier after their update, or in one process end the run there: the step's local-state
  // sync starts with a barrier): the leader may then sum elsewhere or grow the buffer.
  // `deferred` (empty, or one per value): values whose contents are a DeferredProduct's, unwritten;
  // the reduction computes them (in one process, tile by tile into the sum; else first, whole).
  virtual size_t all_reduce_for_update(int replica, ReduceOp op, std::span<Tensor> values, bool slice_shards,
                                       std::span<const float*> results,
                                       std::span<const DeferredProduct* const> deferred = {}) = 0;
  // Where the next all_reduce_for_update reads `replica`'s values in place if they are there already,
  // so that its backward can write them there (framework/device/gradient_placement.h): for each
  // defined value of its last all_reduce_for_update, in order, memory of that value's size. Empty
  // where there is no such place: one process, processes without shared memory, another replica
  // than its process's first. Valid for that call only: a call whose values are not all there, or
  // differ in number or size, copies them as before.
  struct GradientArenaPlan {
    std::vector<float*> memory;
    std::vector<int64_t> sizes;
  };
  virtual GradientArenaPlan gradient_arena_plan(int replica) const {
    (void)replica;
    return {};
  }
  // Reduces `value` over replicas and returns this replica's shard of the flattened result: the
  // elements shard_range(value.size(), n, replica), as a 1-D tensor.
  virtual Tensor reduce_scatter(int replica, ReduceOp op, const Tensor& value) = 0;
  // Every replica's shard, concatenated along dim 0 in replica order (shards may differ in dim 0).
  // With `rows_before`: each replica's first row in the result, and the total last (n + 1 entries).
  virtual Tensor all_gather(int replica, const Tensor& shard, std::vector<int64_t>* rows_before = nullptr) = 0;
  // XLA's AllToAll on matrices: `value` (rows x cols) is cut along `split_axis` (0: rows, 1:
  // columns) into num_replicas consecutive pieces of splits[i] rows or columns (the same `splits` on
  // every replica), piece i goes to replica i, and each replica's result is the pieces it received,
  // in replica order, concatenated along the other axis. A column-parallel layer's exchange
  // (framework/ops/column_parallel.cc). Counted as each piece sent straight to its replica.
  virtual Tensor all_to_all(int replica, const Tensor& value, int split_axis, std::span<const int64_t> splits) = 0;
  // In place: each replica has written its shard_range of every tensor of `values` (flattened);
  // afterwards every replica's tensors hold every replica's shard (ZeRO's parameter all-gather after
  // a sharded update). Tensors that replicas share on the host (mirrored variables) need no copy;
  // the bytes a device would move are counted all the same. Undefined tensors are skipped.
  virtual void all_gather_shards(int replica, std::span<Tensor> values) = 0;
  // Where several processes each hold whole copies of `values` (mirrored variables) and each
  // replica's values hold its process's range (its process_shard_range: the shards of all its
  // replicas, as where they share one host buffer): afterwards every process holds every range.
  // What processes exchange because each keeps its own copy of a variable that a device's cores
  // would update in place: nothing is counted on the cores (the processes count their bytes). In
  // one process, a barrier.
  virtual void share_process_shards(int replica, std::span<Tensor> values) = 0;
  // `value` on every replica becomes root's.
  virtual void broadcast(int replica, Tensor& value, int root) = 0;
  // Returns once every replica has called it.
  virtual void barrier(int replica) = 0;
  // The smallest `value` any replica passed, on every replica (a vote: the first variable whose
  // gradient is not finite). Moves no tensor and is not counted.
  virtual int64_t all_reduce_min(int replica, int64_t value) = 0;
};

class ProcessGroup;

// The host backend: the replicas of this process are its threads, exchanging through shared memory.
// Each operation publishes its arguments, meets the others at a barrier, does its share of the work
// (an even split of the elements, so every thread takes part), and meets them again before anyone
// may free or reuse what was published.
//
// Several processes (mpirun): this process runs the replicas [first_replica, first_replica +
// local_replicas) of the slice, a block of 2^k consecutive replicas starting at a multiple of 2^k —
// a subtree of ReductionTree — so the threads sum their process's partial in tree order and the
// processes' partials are summed across the ProcessGroup in tree order over ranks
// (ProcessGroup::all_reduce_tree): the same additions, in the same order, as one process running
// every replica. The thread of the process's first replica (its leader) makes the MPI calls while
// the others wait at the barrier.
class InProcessCollectives final : public Collectives {
 public:
  // `barrier(replica)` blocks until every replica of this process has called it (the strategy's
  // cancellable barrier).
  InProcessCollectives(Ledger& ledger, int num_replicas, std::function<void(int)> barrier);
  // The replicas [first_replica, first_replica + local_replicas) of num_replicas run here; `processes`
  // (size() * local_replicas == num_replicas) carries the rest. Throws std::invalid_argument when the
  // block is not a subtree (a power of two starting at a multiple of itself).
  InProcessCollectives(Ledger& ledger, int num_replicas, int first_replica, int local_replicas, ProcessGroup* processes,
                       std::function<void(int)> barrier);

  int num_replicas() const override { return num_replicas_; }
  void all_reduce(int replica, ReduceOp op, std::span<Tensor> values) override;
  size_t all_reduce_for_update(int replica, ReduceOp op, std::span<Tensor> values, bool slice_shards,
                               std::span<const float*> results,
                               std::span<const DeferredProduct* const> deferred = {}) override;
  Tensor reduce_scatter(int replica, ReduceOp op, const Tensor& value) override;
  Tensor all_gather(int replica, const Tensor& shard, std::vector<int64_t>* rows_before = nullptr) override;
  // In one process only (std::logic_error across processes).
  Tensor all_to_all(int replica, const Tensor& value, int split_axis, std::span<const int64_t> splits) override;
  void all_gather_shards(int replica, std::span<Tensor> values) override;
  void share_process_shards(int replica, std::span<Tensor> values) override;
  void broadcast(int replica, Tensor& value, int root) override;
  void barrier(int replica) override;
  int64_t all_reduce_min(int replica, int64_t value) override;
  // Several processes on one machine, slice_shards results: this process's gradient arena
  // (ProcessGroup::allocate_gradient_arena), the half the next call uses, laid out as its segment.
  GradientArenaPlan gradient_arena_plan(int replica) const override;
  // What all_reduce of `values` holds and moves on `replica`'s core, where a host program computed
  // the sums itself (ReplicatedStrategy::record_host_all_reduce): the receive buffer charged and
  // released, the traffic recorded. No barrier: called for each core by one thread.
  void record_host_all_reduce(int replica, std::span<const Tensor> values);

 private:
  // What each local replica published for the operation in progress (valid between its barriers).
  struct Posted {
    std::span<Tensor> values;
    const Tensor* tensor = nullptr;
    std::span<const DeferredProduct* const> deferred;  // all_reduce_for_update in one process
    // Tensor i's deferred product, or nullptr (written whole).
    const DeferredProduct* deferred_at(size_t i) const { return i < deferred.size() ? deferred[i] : nullptr; }
  };
  bool several_processes() const { return processes_ != nullptr; }
  int local(int replica) const { return replica - first_; }
  Posted& posted(int replica) { return posted_[static_cast<size_t>(local(replica))]; }
  // The element ranges of each process's replicas' shards of `elements` (consecutive, covering all).
  std::vector<ShardRange> process_ranges(int64_t elements) const;
  // This process's entry of process_ranges, without building the others.
  ShardRange this_process_range(int64_t elements) const;
  // Throws std::logic_error on every replica, after a barrier, when any replica's arguments differ in
  // shape from `reference`'s (beyond dim 0 only, when dim0_may_differ).
  void check_same_shapes(int replica, const char* op, int reference, bool dim0_may_differ) const;
  // Elements [begin, end) of the concatenation of every local replica's values: summed in tree order
  // into the first local replica's values (several processes: into stage_, this process's partials
  // for the others, in shared memory or staging_: nothing is packed or unpacked); then (finish_range) divided for a mean and
  // copied to the other local replicas' values (several processes: to all of them). In one process
  // the mean's division and the check for non-finite values are done here, in the sum's one pass
  // (the same operations, so the same bits): returns the index of the first tensor with a
  // non-finite element in [begin, end) if find_non_finite, else (and with several processes) size().
  // With `in_process_sum` (one process, each replica reading its shard): into in_process_sum_
  // instead, where the replicas read it, and nothing is copied to their values.
  size_t local_sum_range(int64_t begin, int64_t end, ReduceOp op, bool find_non_finite, bool in_process_sum);
  // fn(i, at, lo, hi) for each of the first local replica's tensors (defined, with storage) that
  // overlaps [begin, end) of the concatenation: its elements [lo, hi); it starts at `at`.
  template <class Fn>
  void for_each_slice(int64_t begin, int64_t end, Fn&& fn) const;
  // Then the index of the first tensor with a non-finite element in [begin, end) (size() if none).
  // Where the results go: to every local replica's tensors, or each its own shard (all_reduce_for_update).
  enum class Results { everywhere, process_shards, slice_shards };
  // `summed_vote` is local_sum_range's answer, which it completes.
  size_t finish_range(ReduceOp op, int64_t begin, int64_t end, bool find_non_finite, Results results, size_t summed_vote);
  size_t all_reduce_voting(int replica, ReduceOp op, std::span<Tensor> values, bool find_non_finite, Results results,
                           std::span<const float*> located, std::span<const DeferredProduct* const> deferred = {});
  // all_reduce_voting's end: the last barrier, the traffic recorded (a replica with `children` in
  // ReductionTree), the votes' minimum.
  size_t finish_all_reduce(int replica, int64_t elements, size_t children);
  // An all-reduce's traffic of `elements` floats on `replica`'s core: one exchange per tree link.
  void record_all_reduce_traffic(int replica, int64_t elements, size_t children);
  // Whether any local replica posted tensor i of the values as a DeferredProduct.
  bool posted_deferred(size_t i) const;
  // Part `part` of `parts` of the `elements` an in-process sum computes, after the posts: shard_range's,
  // each boundary inside a deferred tensor moved to the nearest start of a block of its rows, so that
  // the products are computed whole blocks at a time. Who computes an element, never its bits.
  ShardRange summation_share(int64_t elements, int part, int parts) const;
  // An in-process sum's parts (kSumPartsPerReplica per local replica), taken by the replicas as they
  // come (next_sum_part_) rather than one share each: the replicas of a slot that started late, or
  // that shares its core with the input pipeline, take fewer. Returns local_sum_range's vote over
  // the parts this replica took.
  size_t sum_claimed_parts(int64_t elements, ReduceOp op, bool find_non_finite);
  // local_sum_range's work on tensor i when it is deferred: elements [lo, hi) of the sum into out,
  // the products and their sum at once where every replica deferred it (chained_products), else
  // each replica's product computed a tile of rows at a time (`in`: the others' values at lo);
  // returns the first non-finite offset checked, or hi - lo (collectives_deferred.cc).
  int64_t sum_deferred(size_t i, int64_t lo, int64_t hi, std::span<const float* const> in, float* out, int divisor,
                       bool check) const;
  // all_reduce_for_update's results for `values` (this replica's), after its last barrier but one.
  // With `in_process_sum`, in in_process_sum_ (the sum of one process's replicas).
  void locate_results(std::span<Tensor> values, std::span<const float*> results, bool in_process_sum) const;
  // Leader only, before the first barrier: where this process's partial sums go (stage_): its
  // segment of the processes' shared memory (ProcessGroup::shared_partials), else staging_. With
  // shared memory and slice_shards results, the partials of this process's own ranges stay in the
  // first local replica's tensors (own_in_place_): only this process sums them, so they need not
  // cross.
  // With the gradient arena: where the first local replica's `values` are already in the half
  // planned for this call, laid out as the plan says, that half is stage_ (arena_mode_) and nothing
  // is copied into the segment.
  void stage_partials(int64_t elements, Results results, std::span<const Tensor> values);
  bool values_in_arena(std::span<const Tensor> values) const;
  // Leader only, after a slice_shards sum across processes: the arena allocated (once, collectively,
  // for these values' elements) and the next call's half and layout planned.
  void plan_gradient_arena(int64_t elements);
  // local_sum_range's work in several processes: tensor i's elements [lo, hi) (at `at` in the
  // concatenation) of the local replicas' `in`, summed into stage_ (or in place, own_in_place_);
  // moves the pointers of `in` on as it goes.
  void local_sum_for_processes(size_t i, int64_t at, int64_t lo, int64_t hi, std::span<const float*> in);
  // Leader only, between barriers: the partial sums summed across processes (a mean divided there
  // too, with shared memory); summed_ points at the result.
  void all_reduce_across_processes(int64_t elements, ReduceOp op, Results results);
  // Leader only: this process's shards of value's sum across processes (process_ranges) into staging_.
  void reduce_scatter_across_processes(int64_t elements);
  // Leader only: every process's shards of the first local replica's values, from the others.
  void all_gather_shards_across_processes();
  // Leader only, for share_process_shards: where the values are the processes' one shared copy
  // (ProcessGroup::place_in_shared_memory), a barrier; else all_gather_shards_across_processes, and
  // then, unless the window was refused before, the values moved into one shared copy.
  void share_parameters_across_processes();
  // Between barriers after it: each replica's `values`, where not the leader's host buffer, get the
  // other processes' ranges from the leader's.
  void copy_other_processes_ranges(std::span<Tensor> values) const;
  void gather_rows_across_processes(const Tensor& first, std::vector<int64_t>& rows_before);

  Ledger& ledger_;
  const int num_replicas_;
  const int first_ = 0;
  const int local_replicas_;
  ProcessGroup* processes_ = nullptr;  // null: every replica is in this process
  std::function<void(int)> barrier_;
  std::vector<Posted> posted_;
  std::vector<float> staging_;          // the leader's buffer for what crosses processes
  std::vector<float> in_process_sum_;   // all_reduce_for_update in one process: the sum each replica reads its shard of
  float* stage_ = nullptr;              // all_reduce: this process's partial sums (staging_ or shared memory)
  const float* summed_ = nullptr;       // all_reduce: the sum across processes
  int64_t summed_first_non_finite_ = 0;  // in shared memory: its first non-finite element (or its size)
  bool shared_memory_ = false;          // all_reduce: through the processes' shared memory
  bool own_in_place_ = false;           // all_reduce: this process's own ranges summed in place (stage_partials)
  bool arena_mode_ = false;             // all_reduce: the partials are the first replica's values, in the arena
  bool arena_refused_ = false;          // the processes found no room for a gradient arena
  int arena_half_ = 0;                  // the half of the arena the next slice_shards sum uses
  std::vector<int64_t> arena_sizes_;    // the layout it expects (the last such sum's defined values)
  bool placement_refused_ = false;      // share_process_shards: no room for the parameters in shared memory
  std::vector<int64_t> rows_before_;    // all_gather: rows of the replicas before each
  std::vector<int64_t> votes_;          // all_reduce_min: each local replica's value
  std::vector<size_t> non_finite_votes_;  // all_reduce_for_update: each local replica's
  // all_reduce_for_update in one process: the next part of the sum no replica has taken. The
  // leader resets it before the call's first barrier, which every replica passes after the
  // previous call's last one, and so after the previous call's parts were all taken.
  std::atomic<int> next_sum_part_{0};
  int64_t vote_result_ = 0;
};

}  // namespace keel
