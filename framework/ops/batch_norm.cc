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
#include <utility>
#include <vector>

#include "framework/autodiff/tape.h"
#include "framework/core/thread_pool.h"
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

// K per-channel sums over rows: add(r0, r1, partial) adds rows [r0, r1)'s terms into partial[k * C + c]
// (zeroed); blocks of rows (one below 1024 rows, so small batches sum in plain row order) sum on their
// own, then the partial sums add up in block order into sums[k].
template <size_t K, class Add>
void channel_sums_in_blocks(int64_t rows, int64_t channels, const std::array<std::vector<double>*, K>& sums, Add add) {
  const size_t cs = static_cast<size_t>(channels);
  const int64_t blocks = std::clamp<int64_t>(rows / 512, 1, 16), block = (rows + blocks - 1) / blocks;
  std::vector<double> partial(static_cast<size_t>(blocks) * K * cs, 0.0);
  parallel_for(
      blocks, [&](int64_t b) { add(b * block, std::min(rows, (b + 1) * block), partial.data() + b * K * cs); },
      threads_worth(static_cast<double>(rows) * static_cast<double>(channels) * K, kMinElementsPerThread));
  for (size_t k = 0; k < K; ++k) sums[k]->assign(cs, 0.0);
  for (int64_t b = 0; b < blocks; ++b) {
    const double* p = partial.data() + b * K * cs;
    for (size_t k = 0; k < K; ++k) {
      for (size_t c = 0; c < cs; ++c) (*sums[k])[c] += p[k * cs + c];
    }
  }
}

// mean (C,) and biased variance (C,) of x (rows, C), two-pass (the squares are taken around the
// mean, not as E[x²] - E[x]², which cancels badly when |mean| >> std).
template <typename T>
void moments(const T* x, int64_t rows, int64_t channels, float* mean, float* variance) {
  const size_t cs = static_cast<size_t>(channels);
  std::vector<double> sum(cs, 0.0), mean_d(cs, 0.0);
  channel_sums_in_blocks<1>(rows, channels, {&sum}, [&](int64_t r0, int64_t r1, double* s) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* row = x + r * channels;
      for (int64_t c = 0; c < channels; ++c) s[c] += static_cast<double>(detail::load(row, c));
    }
  });
  for (int64_t c = 0; c < channels; ++c) mean_d[c] = rows > 0 ? sum[c] / static_cast<double>(rows) : 0.0;
  channel_sums_in_blocks<1>(rows, channels, {&sum}, [&](int64_t r0, int64_t r1, double* s) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* row = x + r * channels;
      for (int64_t c = 0; c < channels; ++c) {
        const double d = static_cast<double>(detail::load(row, c)) - mean_d[c];
        s[c] += d * d;
      }
    }
  });
  for (int64_t c = 0; c < channels; ++c) {
    mean[c] = static_cast<float>(mean_d[c]);
    variance[c] = rows > 0 ? static_cast<float>(sum[c] / static_cast<double>(rows)) : 0.0f;
  }
}

// y = (x - mean) * (gamma * inv_std) + beta, per row; x and y float32 or bfloat16.
template <typename T, typename TY>
void normalize(const T* x, int64_t rows, int64_t channels, const float* mean, const float* variance,
               const float* gamma, const float* beta, float epsilon, TY* y) {
  const std::vector<double> inv = inv_std_of(variance, channels, epsilon);
  std::vector<float> scale(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) scale[c] = static_cast<float>(static_cast<double>(gamma[c]) * inv[c]);
  detail::for_row_blocks(rows, channels, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * channels;
      TY* yr = y + r * channels;
      for (int64_t c = 0; c < channels; ++c) detail::store(yr, c, (detail::load(xr, c) - mean[c]) * scale[c] + beta[c]);
    }
  });
}

// sum(dy) and sum(dy * (x - mean)) per channel, in double.
template <typename T>
void channel_sums(const float* dy, const T* x, const float* mean, int64_t rows, int64_t channels,
                  std::vector<double>& sum_dy, std::vector<double>& sum_dy_xc) {
  const size_t cs = static_cast<size_t>(channels);
  channel_sums_in_blocks<2>(rows, channels, {&sum_dy, &sum_dy_xc}, [&](int64_t r0, int64_t r1, double* s) {
    double* s_dy = s;
    double* s_dy_xc = s + cs;
    for (int64_t r = r0; r < r1; ++r) {
      const float* dyr = dy + r * channels;
      const T* xr = x + r * channels;
      for (int64_t c = 0; c < channels; ++c) {
        s_dy[c] += static_cast<double>(dyr[c]);
        s_dy_xc[c] += static_cast<double>(dyr[c] * (detail::load(xr, c) - mean[c]));
      }
    }
  });
}

void sum_rows(const float* dy, int64_t rows, int64_t channels, float* out) {
  std::vector<double> sum;
  channel_sums_in_blocks<1>(rows, channels, {&sum}, [&](int64_t r0, int64_t r1, double* s) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* dyr = dy + r * channels;
      for (int64_t c = 0; c < channels; ++c) s[c] += static_cast<double>(dyr[c]);
    }
  });
  for (int64_t c = 0; c < channels; ++c) out[c] = static_cast<float>(sum[static_cast<size_t>(c)]);
}

// dx (rows, C) of batch_norm_training from dy, the saved x, mean and gamma, inv_std and the
// channel sums of dy and dy * (x - mean).
template <typename T>
void training_input_grad(const float* dy, const T* x, const float* mean, const float* gamma,
                         const std::vector<double>& inv, const std::vector<double>& sum_dy,
                         const std::vector<double>& sum_dy_xc, int64_t rows, int64_t channels, float* dx) {
  // dx = a * (dy - b - (x - mean) * k): a = gamma * inv_std, b = sum(dy) / count,
  // k = inv_std² * sum(dy * (x - mean)) / count  (so that (x - mean) * k = x̂ * dgamma / count).
  const size_t cs = static_cast<size_t>(channels);
  const double count = static_cast<double>(rows);
  std::vector<float> a(cs), b(cs), k(cs);
  for (int64_t c = 0; c < channels; ++c) {
    a[c] = static_cast<float>(static_cast<double>(gamma[c]) * inv[c]);
    b[c] = static_cast<float>(sum_dy[c] / count);
    k[c] = static_cast<float>(inv[c] * inv[c] * sum_dy_xc[c] / count);
  }
  detail::for_row_blocks(rows, channels, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * channels;
      const float* dyr = dy + r * channels;
      float* dxr = dx + r * channels;
      for (int64_t c = 0; c < channels; ++c) dxr[c] = a[c] * (dyr[c] - b[c] - (detail::load(xr, c) - mean[c]) * k[c]);
    }
  });
}

}  // namespace

BatchNormResult batch_norm_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, float epsilon) {
  const int64_t channels = check_shapes("batch_norm_training", x, {{"gamma", &gamma}, {"beta", &beta}});
  const int64_t rows = rows_of(x, channels);
  // float32 arithmetic on a bfloat16 input (widened as it is read); the output in the compute dtype.
  const DType dt = compute_dtype();
  BatchNormResult out{Tensor::empty(x.shape(), dt), Tensor::empty({channels}), Tensor::empty({channels})};
  if (compute({&out.y, &out.mean, &out.variance}, {&x, &gamma, &beta})) {
    with_storage(x, out.y, [&](const auto* xd, auto* yd) {
      moments(xd, rows, channels, out.mean.data(), out.variance.data());
      normalize(xd, rows, channels, out.mean.data(), out.variance.data(), gamma.data(), beta.data(), epsilon, yd);
    });
  }
  if (GradientTape::is_recording({&x, &gamma, &beta})) {
    // x, gamma, mean and variance are needed for dx and dgamma; dbeta needs only dy.
    const bool save = GradientTape::is_recording({&x}) || GradientTape::is_recording({&gamma});
    const Tensor saved_x = save ? x : Tensor(), saved_gamma = save ? gamma : Tensor();
    const Tensor saved_mean = save ? out.mean : Tensor(), saved_variance = save ? out.variance : Tensor();
    const Shape x_shape = x.shape();
    const bool x_is_variable = x.is_trainable_variable(), gamma_is_variable = gamma.is_trainable_variable(),
               beta_is_variable = beta.is_trainable_variable();
    GradientTape::record(
        {x, gamma, beta}, {out.y},
        [=](const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
          std::vector<Tensor> grads(3);
          if (needs[0]) grads[0] = detail::grad_buffer(x_shape, x_is_variable);
          if (needs[1]) grads[1] = detail::grad_buffer({channels}, gamma_is_variable);
          if (needs[2]) grads[2] = detail::grad_buffer({channels}, beta_is_variable);
          if (!compute({&grads[0], &grads[1], &grads[2]},
                       {&dy[0], &saved_x, &saved_gamma, &saved_mean, &saved_variance})) {
            return grads;
          }
          if (!needs[0] && !needs[1]) {
            sum_rows(dy[0].data(), rows, channels, grads[2].data());
            return grads;
          }
          const float* mean = saved_mean.data();
          std::vector<double> sum_dy, sum_dy_xc;
          with_storage(saved_x, [&](const auto* xd) { channel_sums(dy[0].data(), xd, mean, rows, channels, sum_dy, sum_dy_xc); });
          const std::vector<double> inv = inv_std_of(saved_variance.data(), channels, epsilon);
          if (needs[2]) {
            for (int64_t c = 0; c < channels; ++c) grads[2].data()[c] = static_cast<float>(sum_dy[c]);
          }
          if (needs[1]) {
            for (int64_t c = 0; c < channels; ++c) grads[1].data()[c] = static_cast<float>(sum_dy_xc[c] * inv[c]);
          }
          if (needs[0] && rows > 0) {
            with_storage(saved_x, [&](const auto* xd) {
              training_input_grad(dy[0].data(), xd, mean, saved_gamma.data(), inv, sum_dy, sum_dy_xc, rows, channels,
                                  grads[0].data());
            });
          }
          return grads;
        });
  }
  return out;
}

Tensor batch_norm_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& moving_mean,
                            const Tensor& moving_variance, float epsilon) {
  const int64_t channels = check_shapes("batch_norm_inference", x,
                                        {{"gamma", &gamma},
                                         {"beta", &beta},
                                         {"moving_mean", &moving_mean},
                                         {"moving_variance", &moving_variance}});
  const int64_t rows = rows_of(x, channels);
  Tensor y = Tensor::empty(x.shape(), compute_dtype());
  if (compute({&y}, {&x, &gamma, &beta, &moving_mean, &moving_variance})) {
    with_storage(x, y, [&](const auto* xd, auto* yd) {
      normalize(xd, rows, channels, moving_mean.data(), moving_variance.data(), gamma.data(), beta.data(), epsilon, yd);
    });
  }
  if (GradientTape::is_recording({&x, &gamma, &beta})) {
    // dx needs gamma and the variance; dgamma needs x and both statistics; dbeta needs only dy.
    const Tensor saved_x = GradientTape::is_recording({&gamma}) ? x : Tensor();
    const Shape x_shape = x.shape();
    const bool x_is_variable = x.is_trainable_variable(), gamma_is_variable = gamma.is_trainable_variable(),
               beta_is_variable = beta.is_trainable_variable();
    GradientTape::record(
        {x, gamma, beta}, {y},
        [=](const std::vector<Tensor>& dy, const std::vector<bool>& needs) {
          std::vector<Tensor> grads(3);
          if (needs[0]) grads[0] = detail::grad_buffer(x_shape, x_is_variable);
          if (needs[1]) grads[1] = detail::grad_buffer({channels}, gamma_is_variable);
          if (needs[2]) grads[2] = detail::grad_buffer({channels}, beta_is_variable);
          if (!compute({&grads[0], &grads[1], &grads[2]}, {&dy[0], &saved_x, &gamma, &moving_mean, &moving_variance})) {
            return grads;
          }
          const std::vector<double> inv = inv_std_of(moving_variance.data(), channels, epsilon);
          if (needs[0] && rows > 0) {
            std::vector<float> a(static_cast<size_t>(channels));
            for (int64_t c = 0; c < channels; ++c) a[c] = static_cast<float>(static_cast<double>(gamma.data()[c]) * inv[c]);
            const float* dyd = dy[0].data();
            float* dxd = grads[0].data();
            detail::for_row_blocks(rows, channels, [&](int64_t r0, int64_t r1) {
              for (int64_t r = r0; r < r1; ++r) {
                const float* dyr = dyd + r * channels;
                float* dxr = dxd + r * channels;
                for (int64_t c = 0; c < channels; ++c) dxr[c] = dyr[c] * a[c];
              }
            });
          }
          if (needs[1]) {
            std::vector<double> sum_dy, sum_dy_xc;
            with_storage(saved_x, [&](const auto* xd) {
              channel_sums(dy[0].data(), xd, moving_mean.data(), rows, channels, sum_dy, sum_dy_xc);
            });
            for (int64_t c = 0; c < channels; ++c) grads[1].data()[c] = static_cast<float>(sum_dy_xc[c] * inv[c]);
            if (needs[2]) {
              for (int64_t c = 0; c < channels; ++c) grads[2].data()[c] = static_cast<float>(sum_dy[c]);
            }
          } else if (needs[2]) {
            sum_rows(dy[0].data(), rows, channels, grads[2].data());
          }
          return grads;
        });
  }
  return y;
}

}  // namespace keel::ops
