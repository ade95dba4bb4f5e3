// Batch normalisation, training and inference forms (see batch_norm.h for the contracts).
//
// Layout: x is viewed as `rows` contiguous rows of C channels (rows = N for (N, C), N*H*W for NHWC).
// Every loop runs rows outside and channels inside, so the inner loop is contiguous and vectorises;
// per-channel sums go to double accumulators. On the replica's share of the threads: elementwise
// passes in blocks of rows, per-channel sums as partial sums over at most 16 blocks of rows, added
// in block order. The blocks follow the shape alone, so the bits do not depend on the threads.
#include "framework/ops/batch_norm.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "framework/autodiff/tape.h"
#include "framework/core/thread_pool.h"
#include "framework/ops/batch_norm_internal.h"
#include "framework/ops/batch_norm_sums.h"
#include "framework/ops/op_util.h"

namespace keel::ops {
namespace {

// Like detail::compute, for ops whose outputs may be empty while an input is not (an empty batch
// with (C,) parameters): an abstract tensor anywhere means planning, and real non-empty outputs
// from an abstract input are an error.
bool compute(std::initializer_list<const Tensor*> outputs, std::initializer_list<const Tensor*> inputs) {
  bool real_output = false;
  for (const Tensor* t : outputs) {
    if (!t->defined()) continue;
    if (t->is_abstract()) return false;
    if (t->size() > 0) real_output = true;
  }
  for (const Tensor* t : inputs) {
    if (t->defined() && t->is_abstract()) {
      if (real_output) throw std::logic_error("op on an abstract input must run in an abstract (planning) context");
      return false;
    }
  }
  return true;
}

// The channel count, after checking x (..., C) against the (C,) parameters.
int64_t check_shapes(const std::string& op, const Tensor& x,
                     std::initializer_list<std::pair<const char*, const Tensor*>> params) {
  if (!x.defined() || x.rank() < 2) {
    detail::shape_error(op, "x must have a batch axis and a channels axis, got " +
                                (x.defined() ? shape_string(x.shape()) : std::string("an undefined tensor")));
  }
  const int64_t channels = x.dim(-1);
  for (const auto& [name, t] : params) {
    if (!t->defined() || t->rank() != 1 || t->dim(0) != channels) {
      detail::shape_error(op, std::string(name) + " must have shape (" + std::to_string(channels) + ",) for x " +
                                  shape_string(x.shape()) + ", got " +
                                  (t->defined() ? shape_string(t->shape()) : std::string("an undefined tensor")));
    }
  }
  return channels;
}

int64_t rows_of(const Tensor& x, int64_t channels) { return channels == 0 ? 0 : x.size() / channels; }

// f(pointer to x's elements) with the pointer typed as x is stored (float32 or bfloat16 bits).
template <typename F>
void with_storage(const Tensor& x, F f) {
  if (x.dtype() == DType::bfloat16) {
    f(x.bfloat16_data());
  } else {
    f(x.data());
  }
}

// The same for an input and an output.
template <typename F>
void with_storage(const Tensor& x, Tensor& y, F f) {
  with_storage(x, [&](const auto* xd) {
    if (y.dtype() == DType::bfloat16) {
      f(xd, y.bfloat16_data());
    } else {
      f(xd, y.data());
    }
  });
}

// 1 / sqrt(variance + epsilon), in double; forward and backward use this same expression.
std::vector<double> inv_std_of(const float* variance, int64_t channels, float epsilon) {
  std::vector<double> inv(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) inv[c] = 1.0 / std::sqrt(static_cast<double>(variance[c]) + epsilon);
  return inv;
}

// K per-channel sums over rows: add(r0, r1, c0, c1, partial) adds rows [r0, r1)'s terms of channels
// [c0, c1) into partial[k * C + c] (zeroed); blocks of rows (one below 1024 rows, so small batches
// sum in plain row order) sum on their own, then the partial sums add up in block order into
// sums[k]. A channel's sums do not depend on the others', so the channels are cut into groups as
// well where there are few blocks (the small images deep in a network: 32 rows of 2048 channels are
// 16 tasks, not one), by the shape alone; neither cut changes a bit.
template <size_t K, class Add>
void channel_sums_in_blocks(int64_t rows, int64_t channels, const std::array<std::vector<double>*, K>& sums, Add add) {
  constexpr int64_t kMaxTasks = 16, kMinGroupChannels = 64, kChannelAlign = 16;
  const size_t cs = static_cast<size_t>(channels);
  const int64_t blocks = std::clamp<int64_t>(rows / 512, 1, kMaxTasks), block = (rows + blocks - 1) / blocks;
  const int64_t groups = std::clamp<int64_t>(channels / kMinGroupChannels, 1, kMaxTasks / blocks);
  const int64_t group = (channels + groups - 1) / groups;
  const int64_t width = std::max<int64_t>(kChannelAlign, (group + kChannelAlign - 1) / kChannelAlign * kChannelAlign);
  const int64_t tasks = blocks * ((channels + width - 1) / width);
  std::vector<double> partial(static_cast<size_t>(blocks) * K * cs, 0.0);
  parallel_for(
      tasks,
      [&](int64_t t) {
        const int64_t b = t % blocks, c0 = t / blocks * width;
        add(b * block, std::min(rows, (b + 1) * block), c0, std::min(channels, c0 + width), partial.data() + b * K * cs);
      },
      threads_worth(static_cast<double>(rows) * static_cast<double>(channels) * K, kMinElementsPerThread));
  for (size_t k = 0; k < K; ++k) sums[k]->assign(cs, 0.0);
  for (int64_t b = 0; b < blocks; ++b) {
    const double* p = partial.data() + b * K * cs;
    for (size_t k = 0; k < K; ++k) {
      for (size_t c = 0; c < cs; ++c) (*sums[k])[c] += p[k * cs + c];
    }
  }
}

// Per channel of x (rows, C), in double, row by row: sum(x), or with `around`, sum((x - around)²)
// (the square an explicit fma, so the bits do not depend on the compiler contracting). Whole groups
// of channels in vector instructions where built with them (batch_norm_sums.h), the rest in this loop.
template <typename T>
std::vector<double> row_sums(const T* x, int64_t rows, int64_t channels, const double* around) {
  std::vector<double> sum;
  channel_sums_in_blocks<1>(rows, channels, {&sum}, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1, double* s) {
    if constexpr (detail::kChannelGroupSumsVectorized && std::is_same_v<T, float>) {
      c0 = detail::channel_group_moment_sums(x, around, channels, r0, r1, c0, c1, s);
    }
    for (int64_t r = r0; r < r1; ++r) {
      const T* row = x + r * channels;
      if (around == nullptr) {
        for (int64_t c = c0; c < c1; ++c) s[c] += static_cast<double>(detail::load(row, c));
        continue;
      }
      for (int64_t c = c0; c < c1; ++c) {
        const double d = static_cast<double>(detail::load(row, c)) - around[c];
        s[c] = std::fma(d, d, s[c]);
      }
    }
  });
  return sum;
}

// mean (C,) and biased variance (C,) of x (rows, C), two-pass (the squares are taken around the
// mean, not as E[x²] - E[x]², which cancels badly when |mean| >> std).
template <typename T>
void moments(const T* x, int64_t rows, int64_t channels, float* mean, float* variance) {
  const std::vector<double> sum = row_sums(x, rows, channels, nullptr);
  std::vector<double> mean_d(static_cast<size_t>(channels), 0.0);
  for (int64_t c = 0; c < channels; ++c) mean_d[c] = rows > 0 ? sum[c] / static_cast<double>(rows) : 0.0;
  const std::vector<double> squares = row_sums(x, rows, channels, mean_d.data());
  for (int64_t c = 0; c < channels; ++c) {
    mean[c] = static_cast<float>(mean_d[c]);
    variance[c] = rows > 0 ? static_cast<float>(squares[c] / static_cast<double>(rows)) : 0.0f;
  }
}

// gamma * inv_std per channel, as float: what normalize multiplies by, and what the backward passes
// of a fused ReLU recompute its mask with.
std::vector<float> scale_of(const float* gamma, const std::vector<double>& inv) {
  std::vector<float> scale(inv.size());
  for (size_t c = 0; c < inv.size(); ++c) scale[c] = static_cast<float>(static_cast<double>(gamma[c]) * inv[c]);
  return scale;
}

// One normalised element, before it is stored: an explicit fma, so that the forward pass and the
// backward passes that recompute a fused ReLU's mask from x get the same bits.
inline float normalized(float x, float mean, float scale, float beta) { return std::fma(x - mean, scale, beta); }

// The gradient a fused ReLU passes back at x's element (row xr, channel c): g where its output,
// normalized(...) stored as TY, is > 0 (the unfused relu's test on its stored output; the derivative
// at 0 is 0), else 0. NoMask passes every g: BatchNormalization without a ReLU.
struct NoMask {
  static constexpr bool kActive = false;
  template <typename T>
  float gate(const T*, int64_t, float g) const {
    return g;
  }
};

template <typename TY>
struct ReluMask {
  static constexpr bool kActive = true;
  const float* mean;
  const float* scale;
  const float* beta;
  // g where the normalised value v, stored as TY, is > 0.
  static float through(float v, float g) {
    if constexpr (std::is_same_v<TY, uint16_t>) v = bfloat16_to_float(bfloat16_bits(v));
    return v > 0.0f ? g : 0.0f;
  }
  template <typename T>
  float gate(const T* xr, int64_t c, float g) const {
    return through(normalized(detail::load(xr, c), mean[c], scale[c], beta[c]), g);
  }
  // out[c] = gate(xr, c, dy[c]) for channels [c0, c1) of a row: a loop of its own, which vectorises.
  template <typename T>
  void gate_row(const T* __restrict xr, const float* __restrict dy, float* __restrict out, int64_t c0, int64_t c1) const {
    const float* __restrict m = mean;
    const float* __restrict k = scale;
    const float* __restrict b = beta;
    for (int64_t c = c0; c < c1; ++c) out[c] = through(normalized(detail::load(xr, c), m[c], k[c], b[c]), dy[c]);
  }
};

// f(mask): NoMask without a ReLU, else the ReluMask of an output stored as bfloat16 or float32
// (scale: scale_of's).
template <typename F>
void with_mask(bool relu, bool bfloat16_output, const float* mean, const std::vector<float>& scale, const float* beta, F f) {
  if (!relu) {
    f(NoMask{});
  } else if (bfloat16_output) {
    f(ReluMask<uint16_t>{mean, scale.data(), beta});
  } else {
    f(ReluMask<float>{mean, scale.data(), beta});
  }
}

// y = (x - mean) * (gamma * inv_std) + beta, per row, then max(y, 0) when Relu (BatchNormalization
// and the ReLU after it in one pass); with a residual (of y's type TY), max(y + residual, 0), each
// sum rounded to TY as the Add between them would; x float32 or bfloat16.
template <bool Relu, typename T, typename TY>
void normalize(const T* x, int64_t rows, int64_t channels, const float* mean, const float* variance,
               const float* gamma, const float* beta, float epsilon, TY* y, const TY* residual = nullptr) {
  const std::vector<float> scale = scale_of(gamma, inv_std_of(variance, channels, epsilon));
  detail::for_row_blocks(rows, channels, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * channels;
      TY* yr = y + r * channels;
      if (residual != nullptr) {
        const TY* sr = residual + r * channels;
        for (int64_t c = 0; c < channels; ++c) {
          float v = normalized(detail::load(xr, c), mean[c], scale[c], beta[c]);
          if constexpr (std::is_same_v<TY, uint16_t>) v = bfloat16_to_float(bfloat16_bits(v));
          const float w = v + detail::load(sr, c);
          detail::store(yr, c, w > 0.0f ? w : 0.0f);
        }
        continue;
      }
      for (int64_t c = 0; c < channels; ++c) {
        float v = normalized(detail::load(xr, c), mean[c], scale[c], beta[c]);
        if constexpr (Relu) v = v > 0.0f ? v : 0.0f;
        detail::store(yr, c, v);
      }
    }
  });
}

// normalize with Relu chosen at run time.
template <typename T, typename TY>
void normalize(bool relu, const T* x, int64_t rows, int64_t channels, const float* mean, const float* variance,
               const float* gamma, const float* beta, float epsilon, TY* y) {
  if (relu) {
    normalize<true>(x, rows, channels, mean, variance, gamma, beta, epsilon, y);
  } else {
    normalize<false>(x, rows, channels, mean, variance, gamma, beta, epsilon, y);
  }
}

// sum(g) and sum(g * (x - mean)) per channel, in double, with g = mask.gate(dy).
template <typename T, typename Mask>
void channel_sums(const float* dy, const T* x, const float* mean, int64_t rows, int64_t channels, const Mask& mask,
                  std::vector<double>& sum_dy, std::vector<double>& sum_dy_xc) {
  const size_t cs = static_cast<size_t>(channels);
  channel_sums_in_blocks<2>(rows, channels, {&sum_dy, &sum_dy_xc}, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1, double* s) {
    double* s_dy = s;
    double* s_dy_xc = s + cs;
    constexpr bool kVector = detail::kChannelGroupSumsVectorized && std::is_same_v<T, float> &&
                             (std::is_same_v<Mask, NoMask> || std::is_same_v<Mask, ReluMask<float>>);
    if constexpr (kVector) {  // whole groups of channels in vector instructions, the rest below
      const float* scale = nullptr;
      const float* beta = nullptr;
      if constexpr (Mask::kActive) scale = mask.scale, beta = mask.beta;
      c0 = detail::channel_group_sums(dy, x, mean, scale, beta, channels, r0, r1, c0, c1, s_dy, s_dy_xc);
      if (c0 == c1) return;
    }
    std::vector<float> gated(Mask::kActive ? cs : 0);
    for (int64_t r = r0; r < r1; ++r) {
      const float* dyr = dy + r * channels;
      const T* xr = x + r * channels;
      if constexpr (Mask::kActive) {
        mask.gate_row(xr, dyr, gated.data(), c0, c1);
        dyr = gated.data();
      }
      for (int64_t c = c0; c < c1; ++c) {
        s_dy[c] += static_cast<double>(dyr[c]);
        s_dy_xc[c] += static_cast<double>(dyr[c] * (detail::load(xr, c) - mean[c]));
      }
    }
  });
}

void sum_rows(const float* dy, int64_t rows, int64_t channels, float* out) {
  const std::vector<double> sum = row_sums(dy, rows, channels, nullptr);
  for (int64_t c = 0; c < channels; ++c) out[c] = static_cast<float>(sum[static_cast<size_t>(c)]);
}

// dx (rows, C) of batch_norm_training from dy (gated by mask), the saved x, mean and gamma, inv_std
// and the channel sums of g and g * (x - mean).
template <typename T, typename Mask>
void training_input_grad(const float* dy, const T* x, const float* mean, const float* gamma, const Mask& mask,
                         const std::vector<double>& inv, const std::vector<double>& sum_dy,
                         const std::vector<double>& sum_dy_xc, int64_t rows, int64_t channels, float* dx) {
  // dx = a * (g - b - (x - mean) * k): a = gamma * inv_std, b = sum(g) / count,
  // k = inv_std² * sum(g * (x - mean)) / count  (so that (x - mean) * k = x̂ * dgamma / count).
  const size_t cs = static_cast<size_t>(channels);
  const double count = static_cast<double>(rows);
  const std::vector<float> a = scale_of(gamma, inv);
  std::vector<float> b(cs), k(cs);
  for (int64_t c = 0; c < channels; ++c) {
    b[c] = static_cast<float>(sum_dy[c] / count);
    k[c] = static_cast<float>(inv[c] * inv[c] * sum_dy_xc[c] / count);
  }
  detail::for_row_blocks(rows, channels, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * channels;
      const float* dyr = dy + r * channels;
      float* dxr = dx + r * channels;
      for (int64_t c = 0; c < channels; ++c) {
        dxr[c] = a[c] * (mask.gate(xr, c, dyr[c]) - b[c] - (detail::load(xr, c) - mean[c]) * k[c]);
      }
    }
  });
}

}  // namespace

void detail::batch_norm_moments(const Tensor& x, Tensor& mean, Tensor& variance) {
  const int64_t channels = x.dim(-1);
  with_storage(x, [&](const auto* xd) { moments(xd, rows_of(x, channels), channels, mean.data(), variance.data()); });
}

void detail::batch_norm_add_relu(const Tensor& x, const Tensor& mean, const Tensor& variance, const Tensor& gamma,
                                 const Tensor& beta, float epsilon, const Tensor& residual, Tensor& y) {
  const int64_t channels = x.dim(-1);
  with_storage(x, y, [&](const auto* xd, auto* yd) {
    using TY = std::remove_pointer_t<decltype(yd)>;
    const TY* sd = nullptr;
    if constexpr (std::is_same_v<TY, uint16_t>) {
      sd = residual.bfloat16_data();
    } else {
      sd = residual.data();
    }
    normalize<true>(xd, rows_of(x, channels), channels, mean.data(), variance.data(), gamma.data(), beta.data(), epsilon,
                    yd, sd);
  });
}

std::vector<Tensor> detail::batch_norm_training_grads(const std::vector<Tensor>& dy, const std::vector<bool>& needs,
                                                     const detail::BatchNormSaved& s) {
  const int64_t rows = s.rows, channels = s.channels;
  std::vector<Tensor> grads(3);
  if (needs[0]) grads[0] = detail::grad_buffer(s.x_shape, s.is_variable[0]);
  if (needs[1]) grads[1] = detail::grad_buffer({channels}, s.is_variable[1], s.placement[1]);
  if (needs[2]) grads[2] = detail::grad_buffer({channels}, s.is_variable[2], s.placement[2]);
  if (!ops::compute({&grads[0], &grads[1], &grads[2]}, {&dy[0], &s.x, &s.gamma, &s.beta, &s.mean, &s.variance})) return grads;
  if (!s.relu && !needs[0] && !needs[1]) {
    sum_rows(dy[0].data(), rows, channels, grads[2].data());
    return grads;
  }
  const float* mean = s.mean.data();
  const std::vector<double> inv = inv_std_of(s.variance.data(), channels, s.epsilon);
  const std::vector<float> scale = scale_of(s.gamma.data(), inv);
  std::vector<double> sum_dy, sum_dy_xc;
  with_mask(s.relu, s.bfloat16_output, mean, scale, s.relu ? s.beta.data() : nullptr, [&](const auto& mask) {
    with_storage(s.x, [&](const auto* xd) {
      channel_sums(dy[0].data(), xd, mean, rows, channels, mask, sum_dy, sum_dy_xc);
      if (needs[0] && rows > 0) {
        training_input_grad(dy[0].data(), xd, mean, s.gamma.data(), mask, inv, sum_dy, sum_dy_xc, rows, channels,
                            grads[0].data());
      }
    });
  });
  if (needs[2]) {
    for (int64_t c = 0; c < channels; ++c) grads[2].data()[c] = static_cast<float>(sum_dy[c]);
  }
  if (needs[1]) {
    for (int64_t c = 0; c < channels; ++c) grads[1].data()[c] = static_cast<float>(sum_dy_xc[c] * inv[c]);
  }
  return grads;
}

BatchNormResult batch_norm_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, float epsilon, bool relu) {
  const int64_t channels = check_shapes("batch_norm_training", x, {{"gamma", &gamma}, {"beta", &beta}});
  const int64_t rows = rows_of(x, channels);
  // float32 arithmetic on a bfloat16 input (widened as it is read); the output in the compute dtype.
  const DType dt = compute_dtype();
  BatchNormResult out{Tensor::empty(x.shape(), dt), Tensor::empty({channels}), Tensor::empty({channels})};
  if (compute({&out.y, &out.mean, &out.variance}, {&x, &gamma, &beta})) {
    with_storage(x, out.y, [&](const auto* xd, auto* yd) {
      moments(xd, rows, channels, out.mean.data(), out.variance.data());
      normalize(relu, xd, rows, channels, out.mean.data(), out.variance.data(), gamma.data(), beta.data(), epsilon, yd);
    });
  }
  if (GradientTape::is_recording({&x, &gamma, &beta})) {
    // x, gamma, mean and variance are needed for dx and dgamma, and for a fused ReLU's mask; without
    // one dbeta needs only dy.
    const bool save = relu || GradientTape::is_recording({&x}) || GradientTape::is_recording({&gamma});
    detail::BatchNormSaved s;
    if (save) s.x = x, s.gamma = gamma, s.mean = out.mean, s.variance = out.variance;
    if (relu) s.beta = beta;
    s.x_shape = x.shape(), s.rows = rows, s.channels = channels, s.epsilon = epsilon;
    s.relu = relu, s.bfloat16_output = dt == DType::bfloat16;
    s.is_variable = {x.is_trainable_variable(), gamma.is_trainable_variable(), beta.is_trainable_variable()};
    s.placement = {0, detail::placement_key(gamma), detail::placement_key(beta)};
    GradientTape::record({x, gamma, beta}, {out.y}, [s = std::move(s)](const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
      return detail::batch_norm_training_grads(dy, needs, s);
    });
  }
  return out;
}

std::vector<Tensor> detail::batch_norm_inference_grads(const std::vector<Tensor>& dy, const std::vector<bool>& needs,
                                                      const Tensor& saved_x, const Tensor& gamma, const Tensor& beta,
                                                      const Tensor& moving_mean, const Tensor& moving_variance,
                                                      float epsilon, bool relu, bool bfloat16_output,
                                                      const std::array<bool, 3>& is_variable) {
  const int64_t channels = gamma.dim(0);
  std::vector<Tensor> grads(3);
  if (needs[0]) grads[0] = detail::grad_buffer(dy[0].shape(), is_variable[0]);
  if (needs[1]) grads[1] = detail::grad_buffer({channels}, is_variable[1]);
  if (needs[2]) grads[2] = detail::grad_buffer({channels}, is_variable[2]);
  if (!ops::compute({&grads[0], &grads[1], &grads[2]}, {&dy[0], &saved_x, &gamma, &beta, &moving_mean, &moving_variance})) {
    return grads;
  }
  const int64_t rows = rows_of(dy[0], channels);
  const std::vector<double> inv = inv_std_of(moving_variance.data(), channels, epsilon);
  const std::vector<float> a = scale_of(gamma.data(), inv);
  const float* mean = moving_mean.data();
  with_mask(relu, bfloat16_output, mean, a, relu ? beta.data() : nullptr, [&](const auto& mask) {
    if (needs[0] && rows > 0) {
      const float* dyd = dy[0].data();
      float* dxd = grads[0].data();
      if (relu) {
        with_storage(saved_x, [&](const auto* xd) {
          detail::for_row_blocks(rows, channels, [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) {
              for (int64_t c = 0; c < channels; ++c) {
                dxd[r * channels + c] = mask.gate(xd + r * channels, c, dyd[r * channels + c]) * a[c];
              }
            }
          });
        });
      } else {
        detail::for_row_blocks(rows, channels, [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) {
            for (int64_t c = 0; c < channels; ++c) dxd[r * channels + c] = dyd[r * channels + c] * a[c];
          }
        });
      }
    }
    if (needs[1] || (relu && needs[2])) {
      std::vector<double> sum_dy, sum_dy_xc;
      with_storage(saved_x, [&](const auto* xd) { channel_sums(dy[0].data(), xd, mean, rows, channels, mask, sum_dy, sum_dy_xc); });
      if (needs[1]) {
        for (int64_t c = 0; c < channels; ++c) grads[1].data()[c] = static_cast<float>(sum_dy_xc[c] * inv[c]);
      }
      if (needs[2]) {
        for (int64_t c = 0; c < channels; ++c) grads[2].data()[c] = static_cast<float>(sum_dy[c]);
      }
    } else if (needs[2]) {
      sum_rows(dy[0].data(), rows, channels, grads[2].data());
    }
  });
  return grads;
}

Tensor batch_norm_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& moving_mean,
                            const Tensor& moving_variance, float epsilon, bool relu) {
  const int64_t channels = check_shapes("batch_norm_inference", x,
                                        {{"gamma", &gamma},
                                         {"beta", &beta},
                                         {"moving_mean", &moving_mean},
                                         {"moving_variance", &moving_variance}});
  const int64_t rows = rows_of(x, channels);
  const DType dt = compute_dtype();
  Tensor y = Tensor::empty(x.shape(), dt);
  if (compute({&y}, {&x, &gamma, &beta, &moving_mean, &moving_variance})) {
    with_storage(x, y, [&](const auto* xd, auto* yd) {
      normalize(relu, xd, rows, channels, moving_mean.data(), moving_variance.data(), gamma.data(), beta.data(), epsilon,
                yd);
    });
  }
  if (GradientTape::is_recording({&x, &gamma, &beta})) {
    // dx needs gamma and the variance (and x, for a fused ReLU's mask); dgamma needs x and both
    // statistics; dbeta needs only dy (and x, with a ReLU).
    const Tensor saved_x = relu || GradientTape::is_recording({&gamma}) ? x : Tensor();
    const std::array<bool, 3> is_variable = {x.is_trainable_variable(), gamma.is_trainable_variable(),
                                             beta.is_trainable_variable()};
    const bool bfloat16_output = dt == DType::bfloat16;
    GradientTape::record({x, gamma, beta}, {y}, [=](const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
      return detail::batch_norm_inference_grads(dy, needs, saved_x, gamma, beta, moving_mean, moving_variance, epsilon, relu, bfloat16_output,
                             is_variable);
    });
  }
  return y;
}

}  // namespace keel::ops
