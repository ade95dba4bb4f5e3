// 3x3 stride-1 "same" convolutions on 2x2 maps (ConvGeometry::two_by_two: ResNet50's fourth stage
// at 32x32 inputs). Every output pixel sees every input pixel, each through one of the kernel's taps,
// so im2col's patches would be 5/9 padding and its products 2.25x the arithmetic. Instead x and y
// are viewed as image rows (2 pixels x C channels each) and each pair of an input and an output row
// is a few matrix products against consecutive taps of the HWIO kernel (two taps of a kernel row are
// one (2 Cin x Cout) matrix) or one tap's transpose: only the taps' own arithmetic, no workspace.
// Tasks are output columns (forward), input columns (dx) or taps (dkernel) by blocks of images, from
// the shape alone; each element gets its terms in one fixed order, so the bits do not depend on the
// threads. Float32 operands only (conv.cc widens nothing for them).
#pragma once

#include "framework/ops/conv_geometry.h"

namespace keel::ops::detail {

// y (N, 2, 2, Cout) = conv(x (N, 2, 2, Cin), kernel (3, 3, Cin, Cout)), written whole.
void two_by_two_forward(const ConvGeometry& g, const float* x, const float* kernel, float* y);

// dx (N, 2, 2, Cin) and dkernel (3, 3, Cin, Cout) from dy, each written whole; either may be null.
void two_by_two_backward(const ConvGeometry& g, const float* x, const float* kernel, const float* dy, float* dx,
                         float* dkernel);

}  // namespace keel::ops::detail
