// One host program for a process's replicas: where each replica's rows are in a batch of all of them.
//
// A training step of a model whose layers treat each row alone (a Sequential of Dense, Activation and
// Flatten layers: Model::train_step_on_cores) runs once over every local replica's rows instead of
// once per replica (ReplicatedStrategy::run_host_program), with the rows of replica r at
// [begin(r), end(r)) of dimension 0 of every batch-shaped tensor. Ops read this thread's ReplicaRows
// wherever a replica's result depends on which rows are its own, and compute what the replicas and
// their all-reduce would have:
//   - a matrix product over rows: each replica's rows get the bits of its own product (ops::matmul);
//   - a variable's gradient: the replicas' mean, summed in the collectives' tree order (ops::matmul's
//     kernel, ops::bias_add's bias), as the optimizer's all-reduce gives it;
//   - the loss: each replica's mean over its rows (ops::replica_means).
// Every other op of such a model computes each row alone. The bits are those of the per-replica step
// (tests/model/host_step_test.cc); so is each core's ledger: a batch-shaped tensor is charged to
// each core for its rows (ReplicatedStrategy::rows_context), a variable's gradient whole on every core.
#pragma once

#include <cstdint>
#include <vector>

namespace keel {

class ReplicaRows {
 public:
  // `rows`: each replica's row count, in replica order.
  explicit ReplicaRows(const std::vector<int64_t>& rows);
  int replicas() const { return static_cast<int>(begin_.size()) - 1; }
  int64_t begin(int replica) const { return begin_[static_cast<size_t>(replica)]; }
  int64_t end(int replica) const { return begin_[static_cast<size_t>(replica) + 1]; }
  int64_t rows(int replica) const { return end(replica) - begin(replica); }
  int64_t total() const { return begin_.back(); }

 private:
  std::vector<int64_t> begin_;  // replicas + 1 offsets
};

// This thread's ReplicaRows while a host program runs; nullptr elsewhere.
const ReplicaRows* replica_rows();

// RAII: installs `rows` as this thread's ReplicaRows.
class ReplicaRowsScope {
 public:
  explicit ReplicaRowsScope(const ReplicaRows* rows);
  ~ReplicaRowsScope();
  ReplicaRowsScope(const ReplicaRowsScope&) = delete;
  ReplicaRowsScope& operator=(const ReplicaRowsScope&) = delete;

 private:
  const ReplicaRows* saved_;
};

}  // namespace keel
