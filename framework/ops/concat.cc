// concat: forward copies blocks, backward splits dy (see concat.h).
//
// Viewed around `axis`, input i is (outer, inner_i) with outer = product of the dims before the axis
// and inner_i = dim_i(axis) * product of the dims after it; the output is (outer, sum of inner_i),
// input i occupying columns [offset_i, offset_i + inner_i) of every row.
#include "framework/ops/concat.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "framework/autodiff/tape.h"
#include "framework/ops/op_util.h"

namespace keel::ops {
namespace {

struct Blocks {
  int64_t outer = 1;
  std::vector<int64_t> inner;   // per input
  std::vector<int64_t> offset;  // per input, within an output row
  int64_t row = 0;              // sum of inner
};

Blocks blocks_of(const std::vector<Shape>& shapes, int axis) {
  Blocks b;
  for (int d = 0; d < axis; ++d) b.outer *= shapes[0][static_cast<size_t>(d)];
  for (const Shape& s : shapes) {
    int64_t inner = 1;
    for (size_t d = static_cast<size_t>(axis); d < s.size(); ++d) inner *= s[d];
    b.offset.push_back(b.row);
    b.inner.push_back(inner);
    b.row += inner;
  }
  return b;
}

}  // namespace

Shape concat_output_shape(const std::vector<Shape>& shapes, int axis) {
  if (shapes.empty()) detail::shape_error("concat", "needs at least one input");
  const int rank = static_cast<int>(shapes[0].size());
  if (rank == 0) detail::shape_error("concat", "cannot concatenate scalars");
  if (axis < -rank || axis >= rank) {
    detail::shape_error("concat", "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  }
  const size_t a = static_cast<size_t>(axis < 0 ? axis + rank : axis);
  Shape out_shape = shapes[0];
  out_shape[a] = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape& s = shapes[i];
    bool ok = s.size() == shapes[0].size();
    for (size_t d = 0; ok && d < s.size(); ++d) ok = d == a || s[d] == shapes[0][d];
    if (!ok) {
      detail::shape_error("concat", "input " + std::to_string(i) + " has shape " + shape_string(s) +
                                        ", incompatible with input 0 " + shape_string(shapes[0]) +
                                        " along axis " + std::to_string(axis));
    }
    out_shape[a] += s[a];
  }
  return out_shape;
}

namespace {

char* bytes_of(Tensor& t) {
  return t.dtype() == DType::bfloat16 ? reinterpret_cast<char*>(t.bfloat16_data()) : reinterpret_cast<char*>(t.data());
}

}  // namespace

Tensor concat(const std::vector<Tensor>& xs, int axis) {
  std::vector<Shape> shapes;
  std::vector<bool> is_variable;
  for (const Tensor& x : xs) {
    shapes.push_back(x.shape());
    is_variable.push_back(x.is_trainable_variable());
  }
  const Shape out_shape = concat_output_shape(shapes, axis);
  const int a = axis < 0 ? axis + static_cast<int>(shapes[0].size()) : axis;
  const Blocks b = blocks_of(shapes, a);

  // Concatenates in the compute dtype (bfloat16 inputs are copied as they are).
  const DType dt = compute_dtype();
  std::vector<Tensor> ins;
  for (const Tensor& x : xs) ins.push_back(dt == DType::float32 ? detail::operand(x, dt).value : x.to(dt));
  Tensor y = Tensor::empty(out_shape, dt);
  bool real = !y.is_abstract();
  for (const Tensor& x : ins) real = detail::compute(y, {&x}) && real;
  if (real && y.size() > 0) {
    const size_t element = static_cast<size_t>(dtype_size(dt));
    char* yd = bytes_of(y);
    for (size_t i = 0; i < ins.size(); ++i) {
      if (b.inner[i] == 0) continue;
      const char* xd = bytes_of(ins[i]);
      const size_t bytes = static_cast<size_t>(b.inner[i]) * element;
      for (int64_t o = 0; o < b.outer; ++o) {
        std::memcpy(yd + (o * b.row + b.offset[i]) * element, xd + o * b.inner[i] * element, bytes);
      }
    }
  }

  bool recording = false;
  for (const Tensor& x : xs) recording = recording || GradientTape::is_recording({&x});
  if (recording) {
    GradientTape::record(xs, {y}, [shapes, is_variable, b](const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
      std::vector<Tensor> grads(shapes.size());
      for (size_t i = 0; i < shapes.size(); ++i) {
        if (!needs[i]) continue;
        grads[i] = detail::grad_buffer(shapes[i], is_variable[i]);
        if (grads[i].size() == 0 || !detail::compute(grads[i], {&dy[0]})) continue;
        const float* dyd = dy[0].data();
        float* gd = grads[i].data();
        const size_t bytes = static_cast<size_t>(b.inner[i]) * sizeof(float);
        for (int64_t o = 0; o < b.outer; ++o) std::memcpy(gd + o * b.inner[i], dyd + o * b.row + b.offset[i], bytes);
      }
      return grads;
    });
  }
  return y;
}

}  // namespace keel::ops
