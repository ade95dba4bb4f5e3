// Differentiable ops. Each op computes its output (skipping arithmetic on abstract tensors) and, when
// a GradientTape depends on an input, records a backward closure holding only what backward needs.
// New tensors are charged per the thread's DeviceContext (category/owner set by the caller's scope).
#pragma once

#include <cstdint>

#include "framework/core/tensor.h"

namespace keel::ops {

// (N, K) x (K, M) -> (N, M). Saves both inputs.
Tensor matmul(const Tensor& a, const Tensor& b);
// x (..., C) + bias (C,). Saves nothing.
Tensor bias_add(const Tensor& x, const Tensor& bias);
// Saves its output.
Tensor relu(const Tensor& x);
// Row-wise softmax over the last axis. Saves its output.
Tensor softmax(const Tensor& x);
// Elementwise.
Tensor add(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& x, float factor);
// Shares storage; backward reshapes the gradient back.
Tensor reshape(const Tensor& x, const Shape& shape);

// A Dense layer's x (rows, K) · kernel (K, N) [+ bias (N,)] when a LayoutMap splits the kernel (and
// the bias, when given) along N across the cores, inside strategy.run: each core computes its columns
// for every replica's rows (framework/ops/column_parallel.cc). The kernel's gradient is the stack
// (replicas, K, this core's columns) of every replica's, the bias's likewise (replicas, columns);
// the optimizer reduces them. Under a bfloat16 policy, rounded as matmul and bias_add round. Saves x
// (as matmul keeps it).
Tensor column_parallel_matmul(const Tensor& x, const Tensor& kernel, const Tensor& bias = Tensor());

// Sum / mean of all elements -> scalar (shape ()).
Tensor reduce_sum(const Tensor& x);
Tensor reduce_mean(const Tensor& x);
// In a host program (framework/device/replica_rows.h): x (rows,) -> (replicas,), each replica's
// reduce_mean over its rows, the same bits; backward gives each row its replica's gradient / its rows.
Tensor replica_means(const Tensor& x);

// Per-example cross-entropy (N,) from logits (N, C). `labels` are probabilities (N, C)
// (tf.nn.softmax_cross_entropy_with_logits) or class ids (N,) as floats (the sparse form).
// Saves the softmax of the logits. Gradient flows to the logits only, and is softmax - labels, which
// assumes (as TensorFlow does) that each row of `labels` sums to 1.
Tensor softmax_cross_entropy_with_logits(const Tensor& labels, const Tensor& logits);
Tensor sparse_softmax_cross_entropy_with_logits(const Tensor& labels, const Tensor& logits);
// Keras's categorical_crossentropy on probabilities: p normalised per row, clipped to
// [1e-7, 1 - 1e-7], -sum(y * log p). (N,). Saves the probabilities.
Tensor categorical_crossentropy(const Tensor& labels, const Tensor& probs);
Tensor sparse_categorical_crossentropy(const Tensor& labels, const Tensor& probs);

// Inverted dropout: keeps each element with probability 1 - rate and scales it by 1/(1 - rate).
// The mask is a pure function of `key` and the element index. Saves the mask.
Tensor dropout(const Tensor& x, float rate, uint64_t key);

}  // namespace keel::ops
