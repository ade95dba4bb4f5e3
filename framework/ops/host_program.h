// What ops compute differently inside a host program (framework/device/replica_rows.h): where a
// replica's result depends on which rows are its own, each replica's rows alone, and a variable's
// gradient as the replicas' mean that the optimizer's all-reduce would give.
#pragma once

#include <cstdint>

#include "framework/core/tensor.h"
#include "framework/device/replica_rows.h"

namespace keel::ops::detail {

// This thread's ReplicaRows where `x` is a batch-shaped tensor of its rows (dimension 0 = their
// total); nullptr elsewhere, and outside a host program.
const ReplicaRows* rows_of(const Tensor& x);

// y (N, M) = a (N, K) · b (K, M), or · bᵀ for b (M, K) with `transpose_b`, each replica's rows with
// the bits of its own product: one product over all the rows where that gives them (checked once
// per shape and thread on random operands: oneDNN 2.6 computes an element from the inner dimension
// alone, ops/sgemm.h, but no library promises it), else one product per replica's rows, replicas on
// the thread's share of the compute threads, each product on one.
void replica_products(Tensor& y, const Tensor& a, const Tensor& b, bool transpose_b, const ReplicaRows& rows);
// Whether replica_products takes one product over all the rows for this shape (the check above).
bool products_split_alike(const ReplicaRows& rows, int64_t k, int64_t m, bool transpose_b);

// grad (K, M) = the mean over replicas of each one's aᵀ · dy over its rows, with the bits of the
// optimizer's all-reduce of the replicas' own gradients: keel's chained products where the shape
// takes them (ops/gemm.h chained_kernel_gradient) or gives the same bits (chained_mean_alike), else
// each replica's oneDNN product and the collectives' tree mean. Every replica's rows must be as many
// (std::logic_error otherwise).
void replica_mean_kernel_gradient(Tensor& grad, const Tensor& a, const Tensor& dy, const ReplicaRows& rows);
// Whether replica_mean_kernel_gradient takes the chained products for a gradient the per-replica
// step leaves to oneDNN (small ones: checked once per shape and thread, as products_split_alike).
bool chained_mean_alike(const ReplicaRows& rows, int64_t k, int64_t m, int64_t n);

// out (C) = the mean over replicas of the column sums of each one's rows of dy (N, C): a bias's
// gradient, as bias_add's backward and the all-reduce give it.
void replica_mean_column_sums(const Tensor& dy, float* out, const ReplicaRows& rows);

// Each core's forward FLOPs of a product of `flops_per_row` a row, for its replica's rows
// (count_forward_flops in ops/op_util.h, for one core).
void count_forward_flops_by_rows(int64_t flops_per_row, const ReplicaRows& rows);

}  // namespace keel::ops::detail
