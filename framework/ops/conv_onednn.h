// conv2d's kernels on oneDNN (Debian's libdnnl, the library PyTorch's CPU convolutions use):
// its JIT convolutions for this CPU (brgconv/jit, AVX-512 where the CPU has it) read NHWC activations
// in place; the HWIO kernel is reordered into the layout each primitive wants (in a workspace buffer,
// or once for the replicas of a process: shared_kernels.h).
// Under bfloat16 (mixed precision) every pass runs on oneDNN's bfloat16 kernels (vdpbf16ps / AMX:
// bfloat16 operands, float32 sums, subnormal inputs and results flushed to zero) where the CPU has
// them: forward from bfloat16 x into bfloat16 y, backward from bfloat16 x and dy (rounded) into
// float32 dx and dkernel, as keel's gradients are float32.
//
// Threads: the images of the batch are cut into equal tasks fixed by the shape alone, each run on
// one thread of the replica's share (oneDNN's own OpenMP threading is held at 1 in keel's threads).
// Forward and the input's gradient compute each image the same way in any task; the kernel's
// gradient is summed per task into its own partial buffer and the partials are added in task order.
// So results are the same bits whatever the number of threads.
//
// Memory: the reordered kernel, one scratchpad per task (oneDNN's, in user mode) and the kernel
// gradient's partials are `workspace` tensors of the current core, allocated on planning runs too
// (x == nullptr / real == false), so the plan equals the run (a shared reorder is read from host
// memory, its workspace charged all the same).
#pragma once

#include <cstdint>

#include "framework/core/tensor.h"
#include "framework/ops/conv_geometry.h"
#include "framework/ops/shared_kernels.h"

namespace keel::ops::detail {

// Whether oneDNN computes a float32 convolution of this geometry: when it has at least 256 output
// pixels. Below that (ResNet18's last stages at 32x32 inputs: 32 to 128 pixels per replica) the
// kernel's reorder into oneDNN's layout, once per call, costs more than the faster product saves
// (measured on ResNet18 training, bench/conv_bench and ONEDNN_VERBOSE=1). Nor a single-tap one
// (conv_geometry.h), whatever its size: one GEMM on the tap's slice of the kernel; nor a 3x3 one on
// 2x2 maps (ConvGeometry::two_by_two: the taps' products, conv_two_by_two.h).
bool onednn_runs(const ConvGeometry& g);
// Whether it computes the input's gradient too: for inputs of 16 channels or more. oneDNN pads
// channels to blocks of 16, and its dx on the 1- and 3-channel stems ran 2.5-5x slower than im2col.
bool onednn_runs_dx(const ConvGeometry& g);
// Whether it computes the kernel's gradient too (float32 x and dy): not for a pointwise convolution,
// whose kernel gradient is one product xᵀ · dy over every pixel (ops/gemm.h, its inner dimension in
// segments), against oneDNN 2.6's older 1x1 backward-weights kernels: over ResNet50's 31 pointwise
// layers at 224x224 b8 about 6-9 ms a step less on 2 threads, most at 7x7 (2048->512: 3.21 against
// 4.98 ms, 2.71 against 3.70), though oneDNN won 256->64 at 56x56 in both runs; even at 32x32 b32
// (build/bench/conv_bench 2 7 pointwise, its last column, two runs, 2026-11-30).
bool onednn_runs_dk(const ConvGeometry& g);

// y (N, OH, OW, Cout) = conv(x, kernel) (+ with_bias: bias (Cout,), added by the kernel to each sum
// before it is stored: the bits of the sum stored, then the bias added); x == nullptr plans (charges
// the workspace only; bias may be null then, with_bias still saying which primitive runs).
void onednn_conv_forward(const ConvGeometry& g, const float* x, const KernelRef& kernel, float* y, bool with_bias = false,
                         const float* bias = nullptr);
// How many bands of rows each image's float32 forward pass (of output rows) or input gradient (of
// input rows) is cut into (1: whole images), where the batch gives fewer tasks than the work is
// worth; the bits are the whole image's.
int64_t onednn_row_bands(const ConvGeometry& g, bool input_gradient);

// Whether oneDNN computes the forward pass of a bfloat16 convolution of this geometry: where it
// computes float32 ones (onednn_runs) and this CPU has its bfloat16 kernels (AVX512_BF16 or AMX).
bool onednn_runs_bfloat16(const ConvGeometry& g);
// y (bfloat16 bits) = conv(x (bfloat16 bits), kernel), the float32 kernel rounded to nearest even
// by the reorder into the primitive's bfloat16 layout (values that are bfloat16 numbers stay as they
// are): products exact in float32, summed in float32, rounded to nearest even into y — the
// semantics of conv2d under bfloat16 (framework/ops/precision.h), in oneDNN's summation order.
// x == nullptr plans.
void onednn_conv_forward_bfloat16(const ConvGeometry& g, const uint16_t* x, const KernelRef& kernel, uint16_t* y);

// The gradients given dy, in float32: dx (N, H, W, Cin) when want_dx, dkernel (KH, KW, Cin, Cout)
// when want_dk, both overwritten. x is float32, or bfloat16 bits when x_bfloat16 (widened exactly
// into a float32 workspace for dkernel). real == false plans (charges the workspace only; the
// pointers are unused).
void onednn_conv_backward(const ConvGeometry& g, const void* x, bool x_bfloat16, const KernelRef& kernel, const float* dy,
                          float* dx, float* dkernel, bool want_dx, bool want_dk, bool real);
// The same under bfloat16, on oneDNN's bfloat16 kernels (where onednn_runs_bfloat16): x bfloat16
// bits, the float32 kernel rounded as forward rounds it, dy rounded to nearest even into a bfloat16
// workspace here; dx and dkernel float32 (float32 sums of exact products, oneDNN's order).
void onednn_conv_backward_bfloat16(const ConvGeometry& g, const uint16_t* x, const KernelRef& kernel, const float* dy, float* dx,
                                   float* dkernel, bool want_dx, bool want_dk, bool real);

}  // namespace keel::ops::detail
