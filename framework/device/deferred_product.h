// A kernel gradient a replica leaves for its step's all-reduce to compute (ReplicaContext::defer).
//
// On a device of several replicas, each replica's gradient of a dense kernel (or of a pointwise
// convolution's over few pixels, ops/replicated_kernel_gradient.h) is its own product over its rows
// (xᵀ · dy, a short inner dimension: 16 rows of the seed MLP on v3-8), and the optimizer's
// all-reduce would then read every replica's whole product back to sum it. Deferred, the all-reduce
// computes the replicas' products and their tree sum block by block in registers
// (framework/device/chained_product.h): the products a replica computes when it cannot defer, the
// same sums, so the same bits, without the replicas' products ever written whole
// (framework/device/collectives_deferred.cc).
#pragma once

#include <cstdint>
#include <memory>

#include "framework/device/chained_product.h"

namespace keel {

struct DeferredProduct {
  int64_t rows = 0, cols = 0;  // of the value
  ChainedOperands operands;    // the value's rows [first_row, first_row + product_rows) are operands'
                               // product, its other rows zeros (a single-tap convolution's kernel
                               // gradient: its tap's (Cin, Cout) slice, ops/replicated_kernel_gradient.h)
  int64_t first_row = 0;
  int64_t product_rows = -1;  // -1: the value's rows from first_row on
  std::shared_ptr<const void> owner;  // keeps the operands' memory until the all-reduce has read it
  int64_t product_row_count() const { return product_rows < 0 ? rows - first_row : product_rows; }
  // Rows [begin, end) of the value into out (`cols` floats a row): the replica's product alone.
  void compute_rows(int64_t begin, int64_t end, float* out) const {
    chained_value_rows({&operands, 1}, first_row, product_row_count(), begin, end, 0, cols, out, cols, 1);
  }
};

}  // namespace keel
