// The dtype ops compute in, and casts between float32 and bfloat16.
//
// Mixed precision (Keras's mixed_bfloat16, framework/layers/dtype_policy.h) runs a layer's ops inside
// a ComputeDTypeScope(bfloat16). There every op computes on operands rounded to bfloat16 (round to
// nearest even) with float32 accumulation — the TPU MXU's semantics: a product of two bfloat16 values
// is exact in float32, so float32 kernels on rounded operands are a faithful implementation, and so
// are oneDNN's native bfloat16 convolutions (conv_onednn.h: the same products summed in float32, in
// their own order, subnormals flushed to zero) — and stores its output as a real 2-byte bfloat16
// tensor; what an op keeps for backward is bfloat16 too (a float32 activation it reads is kept as its
// bfloat16 copy; variables are kept as they are, in float32, and rounded again in backward).
// Gradients stay float32; a convolution's backward products read the incoming gradient rounded to
// bfloat16 as well (as TensorFlow's gradient of a bfloat16 op is bfloat16), which lets them run on
// oneDNN's bfloat16 kernels, and return float32. BatchNormalization computes in float32 on its
// bfloat16 input (as Keras's does) and softmax always returns float32 (Keras's advice for the last
// activation). Any op accepts bfloat16 inputs outside such a scope too.
#pragma once

#include "framework/core/dtype.h"
#include "framework/core/tensor.h"

namespace keel::ops {

// This thread's compute dtype: float32 unless a ComputeDTypeScope says otherwise.
DType compute_dtype();

// RAII: ops on this thread compute in `dtype` while it lives.
class ComputeDTypeScope {
 public:
  explicit ComputeDTypeScope(DType dtype);
  ~ComputeDTypeScope();
  ComputeDTypeScope(const ComputeDTypeScope&) = delete;
  ComputeDTypeScope& operator=(const ComputeDTypeScope&) = delete;

 private:
  DType saved_;
};

// x as `dtype` (rounded to nearest even into bfloat16); x itself when it has that dtype already.
// Differentiable: the gradient passes through unchanged (float32), as tf.cast's does.
Tensor cast(const Tensor& x, DType dtype);

}  // namespace keel::ops
