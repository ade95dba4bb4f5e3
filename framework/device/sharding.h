// Partitioned training state (ZeRO, FSDP): which of a replica's per-variable state is split across
// the cores instead of mirrored on every one.
//
//   none       every core holds every parameter, gradient and optimizer slot (TPUStrategy's mirroring;
//              FSDP's NO_SHARD)
//   optimizer  ZeRO stage 1: each core holds only its shard of every optimizer slot, updates only its
//              shard of every variable, and the updated shards are all-gathered into every core's
//              parameters
//   gradients  ZeRO stage 2 (FSDP's SHARD_GRAD_OP): the optimizer's shards, and each gradient is
//              reduce-scattered as soon as backward has finished it, so a core keeps only its shard
//   full       ZeRO stage 3 (FSDP's FULL_SHARD): parameters too — every layer weight is charged to each
//              core for its shard, and a layer's weights are all-gathered (a `workspace` copy while
//              they live) for its forward and again for its backward, then dropped
//
// A variable's shard on core r is the flat element range shard_range(elements, cores, r)
// (framework/device/collectives.h): the first (elements mod cores) cores take one element more.
// Sharding moves bytes and work between cores, never the numbers: every update is elementwise and
// every sum keeps the collectives' tree order, so training is bit-identical to `none`.
#pragma once

#include <string>

namespace keel {

enum class ShardingMode { none = 0, optimizer = 1, gradients = 2, full = 3 };

const char* sharding_mode_name(ShardingMode mode);  // "none", "optimizer", "gradients", "full"
// "none" | "optimizer" | "gradients" | "full"; std::invalid_argument naming the values that work.
ShardingMode parse_sharding_mode(const std::string& text);

}  // namespace keel
