// A kernel gradient a replica leaves for its step's all-reduce to compute (ReplicaContext::defer).
//
// On a device of several replicas, each replica's gradient of a dense kernel is its own product over
// its rows (xᵀ · dy, a short inner dimension: 16 rows of the seed MLP on v3-8), and the optimizer's
// all-reduce then reads every replica's whole product back to sum it. Deferred, the all-reduce
// computes each replica's product a tile at a time and sums the tiles while they are in cache: the
// same products and the same sums, so the same bits, without the replicas' products ever written
// whole (framework/device/collectives_deferred.cc).
#pragma once

#include <cstdint>
#include <functional>

namespace keel {

struct DeferredProduct {
  int64_t rows = 0, cols = 0;  // of the value
  // Writes rows [begin, end) of the value, row-major (`cols` floats a row), with the bits those rows
  // have in the product computed whole.
  std::function<void(int64_t begin, int64_t end, float* out)> compute_rows;
};

}  // namespace keel
