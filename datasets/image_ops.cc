#include "datasets/image_ops.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "framework/device/context.h"

namespace keel {
namespace {

struct Tap {
  int64_t lower, upper;
  float lerp;
};

// TensorFlow's compute_interpolation_weights with the half-pixel scaler.
std::vector<Tap> taps(int64_t out_size, int64_t in_size) {
  std::vector<Tap> t(static_cast<size_t>(out_size));
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  for (int64_t o = 0; o < out_size; ++o) {
    const double in = (static_cast<double>(o) + 0.5) * scale - 0.5;
    const double in_floor = std::floor(in);
    t[static_cast<size_t>(o)] = {std::max<int64_t>(static_cast<int64_t>(in_floor), 0),
                                 std::min<int64_t>(static_cast<int64_t>(std::ceil(in)), in_size - 1),
                                 static_cast<float>(in - in_floor)};
  }
  return t;
}

}  // namespace

Tensor resize_bilinear(const Tensor& images, int64_t height, int64_t width) {
  if (images.rank() != 4) throw std::invalid_argument("resize_bilinear expects (N, H, W, C), got " + shape_string(images.shape()));
  if (height <= 0 || width <= 0) throw std::invalid_argument("resize_bilinear: the size must be positive");
  const int64_t n = images.dim(0), h = images.dim(1), w = images.dim(2), c = images.dim(3);
  HostScope host;
  Tensor out = Tensor::empty({n, height, width, c});
  if (images.is_abstract()) return out;
  const std::vector<Tap> ys = taps(height, h), xs = taps(width, w);
  const float* src = images.data();
  float* dst = out.data();
  for (int64_t b = 0; b < n; ++b) {
    const float* img = src + b * h * w * c;
    for (int64_t oy = 0; oy < height; ++oy) {
      const Tap& ty = ys[static_cast<size_t>(oy)];
      const float* top = img + ty.lower * w * c;
      const float* bottom = img + ty.upper * w * c;
      float* row = dst + ((b * height + oy) * width) * c;
      for (int64_t ox = 0; ox < width; ++ox) {
        const Tap& tx = xs[static_cast<size_t>(ox)];
        for (int64_t ch = 0; ch < c; ++ch) {
          // TF's order: interpolate along x on both rows, then along y.
          const float tl = top[tx.lower * c + ch], tr = top[tx.upper * c + ch];
          const float bl = bottom[tx.lower * c + ch], br = bottom[tx.upper * c + ch];
          const float t = tl + (tr - tl) * tx.lerp;
          const float bo = bl + (br - bl) * tx.lerp;
          row[ox * c + ch] = t + (bo - t) * ty.lerp;
        }
      }
    }
  }
  return out;
}

Tensor adapt_images(const Tensor& images, const Shape& shape) {
  if (shape.size() != 3) throw std::invalid_argument("image shape must be HxWxC, got " + shape_string(shape));
  HostScope host;
  Tensor x = images;
  if (x.rank() == 3) x = x.reshape({x.dim(0), x.dim(1), x.dim(2), 1});
  if (x.rank() != 4) throw std::invalid_argument("adapt_images expects (N, H, W[, C]), got " + shape_string(images.shape()));
  if (x.dim(1) != shape[0] || x.dim(2) != shape[1]) x = resize_bilinear(x, shape[0], shape[1]);
  if (x.dim(3) == shape[2]) return x;
  if (x.dim(3) != 1) {
    throw std::invalid_argument("cannot make " + std::to_string(x.dim(3)) + "-channel images into " +
                                std::to_string(shape[2]) + " channels");
  }
  Tensor out = Tensor::empty({x.dim(0), x.dim(1), x.dim(2), shape[2]});
  if (x.is_abstract()) return out;
  const float* s = x.data();
  float* d = out.data();
  const int64_t pixels = x.size(), c = shape[2];
  for (int64_t p = 0; p < pixels; ++p) {
    for (int64_t ch = 0; ch < c; ++ch) d[p * c + ch] = s[p];
  }
  return out;
}

}  // namespace keel
