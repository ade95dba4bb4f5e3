#include "datasets/image_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "framework/core/random.h"
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

// TF's HalfPixelScalerForNN: all in float, like TF and torch's nearest-exact (whose double product of
// two floats rounds to the same float before floorf).
std::vector<int64_t> nearest_indices(int64_t out_size, int64_t in_size) {
  std::vector<int64_t> idx(static_cast<size_t>(out_size));
  const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
  for (int64_t o = 0; o < out_size; ++o) {
    const float in = (static_cast<float>(o) + 0.5f) * scale;
    idx[static_cast<size_t>(o)] = std::min<int64_t>(static_cast<int64_t>(std::floor(in)), in_size - 1);
  }
  return idx;
}

// Bilinear over a batch, separably: each needed source row is interpolated along x once into a row
// buffer (flat over x * C, with per-element gather indices and weights), then output rows blend two
// such buffers along y. Consecutive output rows that share source rows (upscaling) reuse the buffers.
void bilinear_batch(const float* src, float* dst, int64_t n, int64_t h, int64_t w, int64_t c, int64_t height,
                    int64_t width) {
  const std::vector<Tap> ys = taps(height, h), xs = taps(width, w);
  const size_t row = static_cast<size_t>(width * c);
  std::vector<int32_t> lo(row), hi(row);
  std::vector<float> lerp(row);
  for (int64_t ox = 0; ox < width; ++ox) {
    const Tap& t = xs[static_cast<size_t>(ox)];
    for (int64_t ch = 0; ch < c; ++ch) {
      const size_t j = static_cast<size_t>(ox * c + ch);
      lo[j] = static_cast<int32_t>(t.lower * c + ch);
      hi[j] = static_cast<int32_t>(t.upper * c + ch);
      lerp[j] = t.lerp;
    }
  }
  std::vector<float> buf_a(row), buf_b(row);
  auto horizontal = [&](const float* s, float* out) {
    const int32_t* l = lo.data();
    const int32_t* u = hi.data();
    const float* f = lerp.data();
    for (size_t j = 0; j < row; ++j) {
      const float left = s[l[j]], right = s[u[j]];
      out[j] = left + (right - left) * f[j];
    }
  };
  for (int64_t b = 0; b < n; ++b) {
    const float* img = src + b * h * w * c;
    int64_t row_a = -1, row_b = -1;  // source rows held in buf_a / buf_b
    for (int64_t oy = 0; oy < height; ++oy) {
      const Tap& ty = ys[static_cast<size_t>(oy)];
      // Keep top in buf_a and bottom in buf_b, swapping or recomputing only what changed.
      if (row_a != ty.lower) {
        if (row_b == ty.lower) {
          std::swap(buf_a, buf_b);
          std::swap(row_a, row_b);
        } else {
          horizontal(img + ty.lower * w * c, buf_a.data());
          row_a = ty.lower;
        }
      }
      if (row_b != ty.upper) {
        if (ty.upper == row_a) {
          buf_b = buf_a;
        } else {
          horizontal(img + ty.upper * w * c, buf_b.data());
        }
        row_b = ty.upper;
      }
      float* out = dst + (b * height + oy) * static_cast<int64_t>(row);
      const float* t = buf_a.data();
      const float* bo = buf_b.data();
      const float ly = ty.lerp;
      for (size_t j = 0; j < row; ++j) out[j] = t[j] + (bo[j] - t[j]) * ly;
    }
  }
}

void nearest_batch(const float* src, float* dst, int64_t n, int64_t h, int64_t w, int64_t c, int64_t height,
                   int64_t width) {
  const std::vector<int64_t> ys = nearest_indices(height, h), xs = nearest_indices(width, w);
  for (int64_t b = 0; b < n; ++b) {
    const float* img = src + b * h * w * c;
    for (int64_t oy = 0; oy < height; ++oy) {
      const float* s = img + ys[static_cast<size_t>(oy)] * w * c;
      float* out = dst + ((b * height + oy) * width) * c;
      if (c == 1) {
        for (int64_t ox = 0; ox < width; ++ox) out[ox] = s[xs[static_cast<size_t>(ox)]];
      } else {
        for (int64_t ox = 0; ox < width; ++ox) {
          std::memcpy(out + ox * c, s + xs[static_cast<size_t>(ox)] * c, sizeof(float) * static_cast<size_t>(c));
        }
      }
    }
  }
}

// (H, W, C) images are a batch of one; returns (n, h, w, c).
void image_dims(const Tensor& images, const char* what, int64_t& n, int64_t& h, int64_t& w, int64_t& c) {
  if (images.rank() == 3) {
    n = 1, h = images.dim(0), w = images.dim(1), c = images.dim(2);
  } else if (images.rank() == 4) {
    n = images.dim(0), h = images.dim(1), w = images.dim(2), c = images.dim(3);
  } else {
    throw std::invalid_argument(std::string(what) + " expects (H, W, C) or (N, H, W, C), got " +
                                shape_string(images.shape()));
  }
}

Shape like(const Tensor& images, int64_t n, int64_t h, int64_t w, int64_t c) {
  return images.rank() == 3 ? Shape{h, w, c} : Shape{n, h, w, c};
}

// Each image mirrored along its width (or height) when image b's draw, counter b of the seed's
// stream, has its top bit set: probability 1/2, independently.
Tensor random_flip(const Tensor& image, uint64_t seed, bool along_height, const char* what) {
  int64_t n, h, w, c;
  image_dims(image, what, n, h, w, c);
  HostScope host;
  Tensor out = Tensor::empty(image.shape());
  if (image.is_abstract() || out.size() == 0) return out;
  const int64_t plane = h * w * c;
  const size_t pixel_bytes = sizeof(float) * static_cast<size_t>(c);
  for (int64_t b = 0; b < n; ++b) {
    const float* s = image.data() + b * plane;
    float* d = out.data() + b * plane;
    const bool flip = (Rng(seed, static_cast<uint64_t>(b)).next_u64() >> 63) != 0;
    if (!flip) {
      std::memcpy(d, s, sizeof(float) * static_cast<size_t>(plane));
    } else if (along_height) {
      for (int64_t y = 0; y < h; ++y) std::memcpy(d + y * w * c, s + (h - 1 - y) * w * c, pixel_bytes * static_cast<size_t>(w));
    } else {
      for (int64_t y = 0; y < h; ++y) {
        for (int64_t x = 0; x < w; ++x) std::memcpy(d + (y * w + x) * c, s + (y * w + (w - 1 - x)) * c, pixel_bytes);
      }
    }
  }
  return out;
}

// An integer tap index moved into [0, size) by the fill mode; -1 for constant fill outside.
int64_t fix_index(int64_t i, int64_t size, FillMode mode) {
  if (i >= 0 && i < size) return i;
  switch (mode) {
    case FillMode::kConstant:
      return -1;
    case FillMode::kNearest:
      return i < 0 ? 0 : size - 1;
    case FillMode::kWrap:
      return ((i % size) + size) % size;
    case FillMode::kReflect: {
      const int64_t period = 2 * size;  // a b c d d c b a, repeated
      const int64_t m = ((i % period) + period) % period;
      return m < size ? m : period - 1 - m;
    }
  }
  return -1;
}

struct Taps {
  int64_t index[2];
  float weight[2];
  int count;
};

// Coordinates in double: a float32 point of a 224-pixel image would be off by up to 1e-5 pixels.
Taps taps_at(double coordinate, int64_t size, Interpolation interpolation, FillMode mode) {
  // Far outside (or NaN from a degenerate projective k): every tap is outside; clamp before the cast.
  const double limit = 4.0 * static_cast<double>(size) + 4.0;
  coordinate = std::isnan(coordinate) ? -limit : std::clamp(coordinate, -limit, limit);
  if (interpolation == Interpolation::kNearest) {
    return {{fix_index(static_cast<int64_t>(std::round(coordinate)), size, mode), 0}, {1.0f, 0.0f}, 1};
  }
  const double lower = std::floor(coordinate);
  const float upper_weight = static_cast<float>(coordinate - lower);
  const int64_t i = static_cast<int64_t>(lower);
  return {{fix_index(i, size, mode), fix_index(i + 1, size, mode)}, {1.0f - upper_weight, upper_weight}, 2};
}

// One output pixel's c channels from the taps around its input point.
void sample(const float* src, float* out, int64_t w, int64_t c, const Taps& ty, const Taps& tx, float fill_value) {
  for (int64_t ch = 0; ch < c; ++ch) out[ch] = 0.0f;
  for (int i = 0; i < ty.count; ++i) {
    for (int j = 0; j < tx.count; ++j) {
      const float weight = ty.weight[i] * tx.weight[j];
      if (ty.index[i] < 0 || tx.index[j] < 0) {
        for (int64_t ch = 0; ch < c; ++ch) out[ch] += weight * fill_value;
        continue;
      }
      const float* s = src + (ty.index[i] * w + tx.index[j]) * c;
      for (int64_t ch = 0; ch < c; ++ch) out[ch] += weight * s[ch];
    }
  }
}

void transform_image(const float* src, float* dst, int64_t h, int64_t w, int64_t c, const ProjectiveTransform& t,
                     Interpolation interpolation, FillMode mode, float fill_value) {
  // Translations and zooms move x and y separately: each column's and row's taps are computed once
  // (the same values the general formula gives, since k = 1 and the cross terms are 0 exactly).
  const bool separable = t[1] == 0.0f && t[3] == 0.0f && t[6] == 0.0f && t[7] == 0.0f;
  std::vector<Taps> xs, ys;
  if (separable) {
    for (int64_t x = 0; x < w; ++x) xs.push_back(taps_at(t[0] * static_cast<double>(x) + t[2], w, interpolation, mode));
    for (int64_t y = 0; y < h; ++y) ys.push_back(taps_at(t[4] * static_cast<double>(y) + t[5], h, interpolation, mode));
  }
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      float* out = dst + (y * w + x) * c;
      if (separable) {
        sample(src, out, w, c, ys[static_cast<size_t>(y)], xs[static_cast<size_t>(x)], fill_value);
        continue;
      }
      const double fx = static_cast<double>(x), fy = static_cast<double>(y);
      const double k = t[6] * fx + t[7] * fy + 1.0;
      sample(src, out, w, c, taps_at((t[3] * fx + t[4] * fy + t[5]) / k, h, interpolation, mode),
             taps_at((t[0] * fx + t[1] * fy + t[2]) / k, w, interpolation, mode), fill_value);
    }
  }
}

}  // namespace

Tensor resize(const Tensor& images, int64_t height, int64_t width, ResizeMethod method) {
  int64_t n, h, w, c;
  image_dims(images, "resize", n, h, w, c);
  if (height <= 0 || width <= 0) throw std::invalid_argument("resize: the size must be positive");
  if (h <= 0 || w <= 0) throw std::invalid_argument("resize: cannot resize an empty image " + shape_string(images.shape()));
  HostScope host;
  Tensor out = Tensor::empty(like(images, n, height, width, c));
  if (images.is_abstract() || out.size() == 0) return out;
  if (method == ResizeMethod::kNearest) {
    nearest_batch(images.data(), out.data(), n, h, w, c, height, width);
  } else {
    bilinear_batch(images.data(), out.data(), n, h, w, c, height, width);
  }
  return out;
}

Tensor resize_bilinear(const Tensor& images, int64_t height, int64_t width) {
  if (images.rank() != 4) throw std::invalid_argument("resize_bilinear expects (N, H, W, C), got " + shape_string(images.shape()));
  return resize(images, height, width, ResizeMethod::kBilinear);
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

Tensor crop_to_bounding_box(const Tensor& images, int64_t top, int64_t left, int64_t height, int64_t width) {
  int64_t n, h, w, c;
  image_dims(images, "crop_to_bounding_box", n, h, w, c);
  if (top < 0 || left < 0 || height <= 0 || width <= 0 || top + height > h || left + width > w) {
    throw std::invalid_argument("crop_to_bounding_box: the box " + std::to_string(height) + "x" + std::to_string(width) +
                                " at (" + std::to_string(top) + ", " + std::to_string(left) + ") leaves the image " +
                                shape_string(images.shape()));
  }
  HostScope host;
  Tensor out = Tensor::empty(like(images, n, height, width, c));
  if (images.is_abstract() || out.size() == 0) return out;
  const size_t row_bytes = sizeof(float) * static_cast<size_t>(width * c);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t y = 0; y < height; ++y) {
      std::memcpy(out.data() + ((b * height + y) * width) * c, images.data() + ((b * h + top + y) * w + left) * c, row_bytes);
    }
  }
  return out;
}

Tensor pad_images(const Tensor& images, int64_t pad_height, int64_t pad_width, float value) {
  int64_t n, h, w, c;
  image_dims(images, "pad_images", n, h, w, c);
  if (pad_height < 0 || pad_width < 0) throw std::invalid_argument("pad_images: the padding must not be negative");
  const int64_t oh = h + 2 * pad_height, ow = w + 2 * pad_width;
  HostScope host;
  Tensor out = Tensor::full(like(images, n, oh, ow, c), value);
  if (images.is_abstract() || out.size() == 0) return out;
  const size_t row_bytes = sizeof(float) * static_cast<size_t>(w * c);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t y = 0; y < h; ++y) {
      std::memcpy(out.data() + ((b * oh + pad_height + y) * ow + pad_width) * c, images.data() + ((b * h + y) * w) * c, row_bytes);
    }
  }
  return out;
}

Tensor affine_transform(const Tensor& images, const std::vector<ProjectiveTransform>& transforms,
                        Interpolation interpolation, FillMode fill_mode, float fill_value) {
  int64_t n, h, w, c;
  image_dims(images, "affine_transform", n, h, w, c);
  if (transforms.size() != 1 && static_cast<int64_t>(transforms.size()) != n) {
    throw std::invalid_argument("affine_transform: " + std::to_string(transforms.size()) + " transforms for " +
                                std::to_string(n) + " images (give one, or one per image)");
  }
  HostScope host;
  Tensor out = Tensor::empty(images.shape());
  if (images.is_abstract() || out.size() == 0) return out;
  const int64_t plane = h * w * c;
  for (int64_t b = 0; b < n; ++b) {
    transform_image(images.data() + b * plane, out.data() + b * plane, h, w, c,
                    transforms[transforms.size() == 1 ? 0 : static_cast<size_t>(b)], interpolation, fill_mode, fill_value);
  }
  return out;
}

Tensor random_flip_left_right(const Tensor& image, uint64_t seed) {
  return random_flip(image, seed, /*along_height=*/false, "random_flip_left_right");
}

Tensor random_flip_up_down(const Tensor& image, uint64_t seed) {
  return random_flip(image, seed, /*along_height=*/true, "random_flip_up_down");
}

Tensor random_crop(const Tensor& image, int64_t height, int64_t width, uint64_t seed) {
  int64_t n, h, w, c;
  image_dims(image, "random_crop", n, h, w, c);
  if (height <= 0 || width <= 0 || height > h || width > w) {
    throw std::invalid_argument("random_crop: cannot crop " + std::to_string(height) + "x" + std::to_string(width) +
                                " from " + shape_string(image.shape()));
  }
  Rng rng(seed);
  const int64_t top = static_cast<int64_t>(rng.next_below(static_cast<uint64_t>(h - height + 1)));
  const int64_t left = static_cast<int64_t>(rng.next_below(static_cast<uint64_t>(w - width + 1)));
  return crop_to_bounding_box(image, top, left, height, width);
}

}  // namespace keel
