// InputContext: which share of every global batch this process's input pipeline must produce
// (tf.distribute.InputContext, as distribute_datasets_from_function hands it to a dataset function).
//
// keel's steps take global batches: replica r trains on the rows shard_range(batch, replicas, r) of
// each one (ReplicatedStrategy::infeed). Under mpirun a process runs a block of consecutive replicas,
// so it reads only one block of rows of every global batch — [first_row, end_row) — and the other
// rows may stay unfilled (zeros): nothing reads them. A pipeline that keeps the one-process order of
// examples (shuffle and read everything, as cheap as indices or encoded records) and decodes,
// augments and resizes only the elements it feeds() gives every process the global batches one
// process would have, with each process doing its share of the work:
//
//   const InputContext input = strategy.input_context(global_batch);
//   ds.shuffle(...).map_with_key([input](const Element& e, const ElementKey& key) {
//       return input.feeds(key.index) ? decode(e) : placeholder_of_the_same_shape;
//     }, AUTOTUNE).batch(global_batch, /*drop_remainder=*/true)
//
// The key's index counts the elements of the iteration, so row = index mod global_batch holds for
// every batch of a pipeline with drop_remainder batches and no filter between the map and the batch.
#pragma once

#include <cstdint>

namespace keel {

struct DeviceSpec;

struct InputContext {
  int num_input_pipelines = 1;   // the processes sharing the slice (1: one process)
  int input_pipeline_id = 0;     // this process's rank
  int num_replicas_in_sync = 1;  // the slice's replicas, every process's
  int64_t global_batch = 0;
  int64_t first_row = 0, end_row = 0;  // this process's rows [first_row, end_row) of each global batch

  // Whether element `index` of an iteration lands in this process's rows of its global batch.
  bool feeds(int64_t index) const {
    if (global_batch <= 0) return true;
    const int64_t row = index % global_batch;
    return row >= first_row && row < end_row;
  }
  // Whether every row is this process's (one process): nothing to skip.
  bool feeds_everything() const { return first_row == 0 && end_row == global_batch; }
  // tf's get_per_replica_batch_size: global_batch / num_replicas_in_sync (std::invalid_argument if it
  // does not divide).
  int64_t get_per_replica_batch_size(int64_t batch) const;
};

// The context of process `rank` of `processes` running `spec` (DeviceSpec::share; std::invalid_argument
// as there), for global batches of `global_batch` rows (>= 0).
InputContext input_context(const DeviceSpec& spec, int processes, int rank, int64_t global_batch);

}  // namespace keel
