#include "framework/device/input_context.h"

#include <stdexcept>
#include <string>

#include "framework/device/collectives.h"
#include "framework/device/device_spec.h"

namespace keel {

int64_t InputContext::get_per_replica_batch_size(int64_t batch) const {
  if (num_replicas_in_sync < 1 || batch % num_replicas_in_sync != 0) {
    throw std::invalid_argument("the global batch size " + std::to_string(batch) + " is not divisible by " +
                                std::to_string(num_replicas_in_sync) + " replicas");
  }
  return batch / num_replicas_in_sync;
}

InputContext input_context(const DeviceSpec& spec, int processes, int rank, int64_t global_batch) {
  if (global_batch < 0) throw std::invalid_argument("input_context: negative global batch " + std::to_string(global_batch));
  const ProcessShare share = spec.share(processes, rank);
  InputContext c;
  c.num_input_pipelines = processes;
  c.input_pipeline_id = rank;
  c.num_replicas_in_sync = spec.cores;
  c.global_batch = global_batch;
  c.first_row = shard_range(global_batch, spec.cores, share.first_core).begin;
  c.end_row = shard_range(global_batch, spec.cores, share.first_core + share.cores - 1).end;
  return c;
}

}  // namespace keel
