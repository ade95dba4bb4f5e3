// The geometry of a sliding window along one axis, as TensorFlow pads it (ops/conv.h): conv2d's and
// the pooling ops'.
#include <algorithm>
#include <string>

#include "framework/ops/conv.h"
#include "framework/ops/op_util.h"

namespace keel::ops {

WindowAxis window_axis(const std::string& op, int64_t input, int64_t kernel, int64_t stride, int64_t dilation,
                       Padding padding) {
  if (kernel < 1 || stride < 1 || dilation < 1) {
    detail::shape_error(op, "window size, stride and dilation must be >= 1 (got window " + std::to_string(kernel) +
                                ", stride " + std::to_string(stride) + ", dilation " + std::to_string(dilation) + ")");
  }
  WindowAxis a;
  a.input = input;
  a.kernel = kernel;
  a.stride = stride;
  a.dilation = dilation;
  const int64_t eff = a.effective_kernel();
  if (input < 0) {  // unknown (shape rules only)
    a.output = -1;
    return a;
  }
  if (padding == Padding::valid) {
    if (input < eff) {
      detail::shape_error(op, "VALID padding needs the input (" + std::to_string(input) +
                                  ") to be at least the window's extent (" + std::to_string(eff) + ")");
    }
    a.output = (input - eff) / stride + 1;
  } else {
    a.output = (input + stride - 1) / stride;
    const int64_t total = std::max<int64_t>((a.output - 1) * stride + eff - input, 0);
    a.pad_before = total / 2;
    a.pad_after = total - a.pad_before;
  }
  return a;
}

}  // namespace keel::ops
