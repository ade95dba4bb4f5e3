// A replicated layer's kernel gradient, xᵀ · dy over the replica's rows, by keel's chained products
// (framework/device/chained_product.h) wherever its shape calls for them (ops::detail::
// chained_kernel_gradient in ops/gemm.h): computed by the replica, or left to the step's all-reduce
// (ReplicaContext::defer), which computes every replica's product and their tree sum block by block
// without writing the replicas' products. The same bits on every path, under any thread or process
// count. A Dense kernel's (ops::matmul) and a pointwise convolution's (ops::conv2d: a 1x1 stride-1
// kernel is a (Cin, Cout) matrix over every pixel) take it alike.
#pragma once

#include "framework/core/tensor.h"
#include "framework/ops/conv_geometry.h"

namespace keel::ops::detail {

// grad (k x width, float32) = aᵀ · dy for a (rows x k) and dy (rows x width), float32, in a replica
// of two or more: true where the shape is the chained products' (then computed, or deferred where
// the step allows), false where it stays oneDNN's (nothing done).
bool replicated_kernel_gradient(Tensor& grad, const Tensor& a, const Tensor& dy);

// A pointwise convolution's kernel gradient the same way, x (N, H, W, Cin) and dy (N, H, W, Cout) read
// as (N·H·W, Cin) and (N·H·W, Cout) matrices; and a single-tap one's (conv_geometry.h: a 3x3 "same"
// convolution on 1x1 maps), its tap's (Cin, Cout) slice that product and the other taps' zeros, which
// the all-reduce then writes once instead of each replica writing and the tree summing them. Only
// over few rows (at most 128 pixels a replica), where the replicas' operands are smaller than the
// gradient itself (rows · (Cin + Cout) <= KH · KW · Cin · Cout: a ResNet's deep layers on small maps,
// whose kernels are large), since deferring copies them: true where it computed or deferred dk. A
// function of the shape and the replica count alone.
bool replicated_pointwise_kernel_gradient(const ConvGeometry& g, const Tensor& x, const Tensor& dy, Tensor& dk);

}  // namespace keel::ops::detail
