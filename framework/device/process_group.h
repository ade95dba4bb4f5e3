// ProcessGroup: the processes of one job — MPI_COMM_WORLD when keel runs under `mpirun` (Open MPI),
// a group of one otherwise. Each process of a pod slice drives a block of consecutive cores
// (DeviceSpec::share); what crosses processes goes through these calls, on float buffers, in an order
// fixed by the topology so that every result is bit-identical whatever the number of processes.
//
// MPI is an implementation detail of process_group.cc: nothing here includes <mpi.h>. The group is
// initialised on first use (MPI_Init_thread, serialized: one thread of a process calls at a time)
// and only when the process was started by mpirun; a keel started on its own never loads MPI's
// transports. Every call is collective: every process makes the same calls in the same order.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "framework/core/tensor.h"
#include "framework/device/collectives.h"

namespace keel {

class ProcessGroup {
 public:
  // This job's group: under mpirun the MPI world (initialised on the first call), else one process.
  static ProcessGroup& world();
  // True when this process was started by mpirun (or another launcher that sets Open MPI's or
  // PMIx's rank variables); decided from the environment, without initialising MPI.
  static bool launched_by_mpirun();

  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool is_chief() const { return rank_ == 0; }

  // Elementwise tree-ordered sum of every process's `values` (ReductionTree over process ranks:
  // ((p0 + p1) + (p2 + p3)) + ...), written back to `values` on every process. Bandwidth-optimal:
  // a reduce-scatter then an all-gather, each moving (P-1)/P of the buffer per process.
  void all_reduce_tree(std::span<float> values);
  // The tree-ordered sum of every process's `values` over the elements [ranges[rank].begin,
  // ranges[rank].end) only, into `out` (that range's size). `ranges` are consecutive and cover
  // [0, values.size()), one per process, the same on every process.
  void reduce_scatter_tree(std::span<const float> values, std::span<const ShardRange> ranges, std::span<float> out);
  // In place: process p has written values[ranges[p]]; afterwards every process holds every range.
  void all_gather_ranges(std::span<float> values, std::span<const ShardRange> ranges);
  // `values` on every process become process `root`'s.
  void broadcast(std::span<float> values, int root);
  // Every process's `bytes_per_process` bytes at mine, concatenated in rank order into `all`
  // (size() * bytes_per_process bytes).
  void all_gather_bytes(const void* mine, int64_t bytes_per_process, void* all);
  // The string `root` holds, on every process.
  std::string broadcast_string(const std::string& value, int root);
  // All-reduce through MPI-3 shared memory (MPI_Win_allocate_shared), where every process of the job
  // runs on one machine: each process writes its partial sums into its own segment of a window the
  // processes share, and each sums its range of every process's segment in place, with no copy
  // through MPI. Two calls:
  //   shared_partials(n): this process's segment for the next sum, n floats (collective; the window
  //     grows when n does); empty where there is no shared memory (processes on several machines, a
  //     window refused, or KEEL_MPI_SHARED_MEMORY=0) — the caller uses all_reduce_tree instead.
  //   sum_shared_partials(n, divisor, mine, read_whole): after every process wrote its segment, the
  //     tree-ordered sum of them (ReductionTree over ranks, as all_reduce_tree), divided by `divisor`
  //     (> 1: a mean), each process summing the ranges `mine` (the processes' together cover [0, n)
  //     once), and the index of the sum's first element that is not finite (n if
  //     none), which each process finds in its ranges as it sums and shares. Every process may then
  //     read the whole sum (read_whole: counted as an all-reduce's bytes) or its ranges only (a
  //     reduce-scatter's). The result stays valid until the call after the next one (segments
  //     alternate between two halves, so a process may start the next sum while another still
  //     reads this one).
  struct SharedSum {
    const float* values = nullptr;
    int64_t first_non_finite = 0;
  };
  std::span<float> shared_partials(int64_t elements);
  // Whether every process runs on this machine and may share memory (not KEEL_MPI_SHARED_MEMORY=0):
  // collective on the first call, the same answer on every process. A window refused later for
  // want of room still makes shared_partials empty.
  bool shares_memory();
  // `own`, when given, holds for each of `mine` where this process's partials of it are (then they
  // need not be in its segment: only this process reads them).
  SharedSum sum_shared_partials(int64_t elements, int divisor, std::span<const ShardRange> mine, bool read_whole,
                                std::span<const float* const> own = {}, int arena_half = -1);
  // Other exchanges through the same memory: after shared_partials, each process writes its segment,
  // then shared_barrier(), then may read any process's segment (shared_segment) until its next
  // shared_partials call but one; count_shared_exchange records the bytes read in place.
  void shared_barrier();
  const float* shared_segment(int process) const;
  // Parameters in the same shared memory: one copy per machine, each process updating its shards
  // of it in place, so that no process copies the others' shards into a copy of its own
  // (Collectives::share_process_shards). place_in_shared_memory(values) (collective) moves the
  // storage of every value (defined, with storage; every process passes the same shapes in the same
  // order and holds the same contents) into one new window, with process 0's contents; the values of
  // a previous call that still exist move back to each process's own memory first (the window holds
  // none alive). False, with nothing moved, where
  // the processes share no memory or the window finds no room. in_shared_memory(t): whether t's
  // storage is in that window. shared_barrier_any(flag): a shared_barrier that also orders the loads
  // and stores of that window, and says whether any process passed true.
  bool place_in_shared_memory(std::span<const Tensor> values);
  bool in_shared_memory(const Tensor& t) const;
  bool shared_barrier_any(bool flag);
  // Whether place_in_shared_memory holds values now.
  bool parameters_shared() const { return parameters_ != nullptr; }
  void count_shared_exchange(int64_t sent, int64_t received);
  // Gradient arenas: where one process's backward writes the gradients of its first core straight
  // into memory the others read, so that no copy puts them in its segment
  // (InProcessCollectives::gradient_arena_plan). allocate_gradient_arena(n) (collective) gives every
  // process two halves of n floats in a window of their own, freed by finalize() (the caller asks
  // once: gradients may live in it); false, with none, where the processes share no memory or the
  // window finds no room. gradient_arena(h): this process's half h (empty without an arena).
  // sum_shared_partials' arena_half (>= 0) says this process's partials are in that half of its
  // arena, laid out as its segment would hold them, instead of in its segment; each process says
  // where its own are, and the sum goes where process 0's partials are (a caller alternating the
  // halves, as the segments alternate, keeps a sum valid as long as a segment's).
  bool allocate_gradient_arena(int64_t elements);
  std::span<float> gradient_arena(int half) const;
  // The sums whose partials this process left in its arena, and the sums through shared memory whose
  // results each process reads its own ranges of (the optimizer's all-reduces).
  int64_t sums_from_arena() const { return sums_from_arena_; }
  int64_t shared_sums() const { return shared_sums_; }

  // The smallest of every process's `value`, on every process.
  int64_t min(int64_t value);
  // True on every process when `flag` is true on any.
  bool any(bool flag);
  void barrier();

  // Bytes this process has sent to / received from the others so far.
  int64_t sent_bytes() const { return sent_bytes_; }
  int64_t received_bytes() const { return received_bytes_; }

  // Ends the whole job with `code` (MPI_Abort): the other processes are killed by mpirun. Without
  // mpirun, std::exit(code).
  [[noreturn]] void abort(int code);
  // MPI_Finalize, once, where MPI was initialised (called at the end of main).
  void finalize();

 private:
  ProcessGroup();
  // The communicator of the processes on this machine (collective on the first call).
  void ensure_node();
  // Allocates (collectively) a window of 2 x `elements` floats per process; false where refused.
  bool allocate_shared(int64_t elements);
  void check_count(int64_t elements, const char* op) const;

  int rank_ = 0;
  int size_ = 1;
  bool mpi_ = false;
  bool finalized_ = false;
  int64_t sent_bytes_ = 0;
  int64_t received_bytes_ = 0;
  std::vector<float> staging_;  // what reduce-scatter receives: one slice from every process
  struct SharedWindow;          // the MPI-3 shared memory of shared_partials (process_group.cc)
  std::unique_ptr<SharedWindow> shared_;
  struct GradientArena;         // allocate_gradient_arena's (process_group.cc)
  std::unique_ptr<GradientArena> arena_;
  void release_gradient_arena();
  // Where process p's partials of the current sum are (its segment, or a half of its arena).
  const float* partials_of(int process) const;
  int64_t sums_from_arena_ = 0;
  int64_t shared_sums_ = 0;
  struct ParameterWindow;       // place_in_shared_memory's (process_group.cc)
  std::unique_ptr<ParameterWindow> parameters_;
  // Moves the placed values back to this process's memory and frees their window (collective).
  void release_parameters();
  bool shared_checked_ = false;  // whether every process shares one machine was asked already
  bool shared_usable_ = false;
};

}  // namespace keel
