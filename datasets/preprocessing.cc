#include "datasets/preprocessing.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "framework/core/limits.h"
#include "framework/core/random.h"
#include "framework/device/context.h"

namespace keel::preprocessing {
namespace {

// (n, h, w) of (H, W, C) or (N, H, W, C) images; `what` names the layer in the error.
void dims(const Tensor& images, const std::string& what, int64_t& n, int64_t& h, int64_t& w) {
  if (images.rank() == 3) {
    n = 1, h = images.dim(0), w = images.dim(1);
  } else if (images.rank() == 4) {
    n = images.dim(0), h = images.dim(1), w = images.dim(2);
  } else {
    throw std::invalid_argument(what + " expects images (H, W, C) or (N, H, W, C), got " + shape_string(images.shape()));
  }
}

// Uniform in [lower, upper) from 24 random bits, as Keras's random.uniform(minval, maxval).
float uniform(Rng& rng, float lower, float upper) { return lower + (upper - lower) * rng.next_float(); }

// Image b's stream: one key per image, so an image's draws do not depend on the batch around it.
Rng image_rng(uint64_t seed, int64_t b) { return Rng(combine_keys(seed, static_cast<uint64_t>(b))); }

void check_factor(float f) {
  if (!(f >= -1.0f && f <= 1.0f)) {
    throw std::invalid_argument("a factor must be a number (or a pair of numbers) in [-1, 1], got " + std::to_string(f));
  }
}

}  // namespace

// ---- RandomFlip ----------------------------------------------------------------------------------

RandomFlip::RandomFlip(std::string mode) : mode_(std::move(mode)) {
  if (mode_ != "horizontal" && mode_ != "vertical" && mode_ != "horizontal_and_vertical") {
    throw std::invalid_argument("RandomFlip: unknown mode '" + quote_untrusted(mode_) +
                                "' (expected horizontal, vertical or horizontal_and_vertical)");
  }
}

Tensor RandomFlip::operator()(const Tensor& images, uint64_t seed, bool training) const {
  int64_t n, h, w;
  dims(images, name(), n, h, w);
  if (!training) return images;
  Tensor out = images;
  if (mode_ != "vertical") out = random_flip_left_right(out, combine_keys(seed, 1));
  if (mode_ != "horizontal") out = random_flip_up_down(out, combine_keys(seed, 2));
  return out;
}

// ---- RandomCrop ----------------------------------------------------------------------------------

RandomCrop::RandomCrop(int64_t height, int64_t width) : height_(height), width_(width) {
  if (height <= 0 || width <= 0) {
    throw std::invalid_argument("RandomCrop: height and width must be positive, got " + std::to_string(height) + "x" +
                                std::to_string(width));
  }
}

Shape RandomCrop::output_shape(const Shape& input) const { return {height_, width_, input.at(2)}; }

Tensor RandomCrop::operator()(const Tensor& images, uint64_t seed, bool training) const {
  int64_t n, h, w;
  dims(images, name(), n, h, w);
  if (training && h > height_ && w > width_) return random_crop(images, height_, width_, seed);
  // Keras: the largest centred window with the target's aspect ratio, then resized to the target.
  const int64_t crop_h = std::max<int64_t>(std::min<int64_t>(h, static_cast<int64_t>(static_cast<double>(w * height_) / static_cast<double>(width_))), 1);
  const int64_t crop_w = std::max<int64_t>(std::min<int64_t>(w, static_cast<int64_t>(static_cast<double>(h * width_) / static_cast<double>(height_))), 1);
  Tensor out = crop_to_bounding_box(images, (h - crop_h) / 2, (w - crop_w) / 2, crop_h, crop_w);
  if (crop_h == height_ && crop_w == width_) return out;
  return resize(out, height_, width_, ResizeMethod::kBilinear);
}

// ---- ZeroPadding2D -------------------------------------------------------------------------------

ZeroPadding2D::ZeroPadding2D(int64_t pad_height, int64_t pad_width) : pad_height_(pad_height), pad_width_(pad_width) {
  if (pad_height < 0 || pad_width < 0) throw std::invalid_argument("ZeroPadding2D: the padding must not be negative");
}

Shape ZeroPadding2D::output_shape(const Shape& input) const {
  return {input.at(0) + 2 * pad_height_, input.at(1) + 2 * pad_width_, input.at(2)};
}

Tensor ZeroPadding2D::operator()(const Tensor& images, uint64_t, bool) const {
  int64_t n, h, w;
  dims(images, name(), n, h, w);
  return pad_images(images, pad_height_, pad_width_);
}

// ---- RandomTranslation, RandomZoom ---------------------------------------------------------------

Factor::Factor(float f) {
  check_factor(f);
  lower = -std::fabs(f);
  upper = std::fabs(f);
}

Factor::Factor(float a, float b) {
  check_factor(a);
  check_factor(b);
  lower = std::min(a, b);
  upper = std::max(a, b);
}

namespace {

// Each image through its own transform, drawn by `draw(b)`.
template <typename Draw>
Tensor transform_each(const Tensor& images, int64_t n, Draw draw, Interpolation interpolation, FillMode fill_mode,
                      float fill_value) {
  std::vector<ProjectiveTransform> transforms;
  transforms.reserve(static_cast<size_t>(n));
  for (int64_t b = 0; b < n; ++b) transforms.push_back(draw(b));
  return affine_transform(images, transforms, interpolation, fill_mode, fill_value);
}

}  // namespace

RandomTranslation::RandomTranslation(Factor height_factor, Factor width_factor, FillMode fill_mode,
                                     Interpolation interpolation, float fill_value)
    : height_(height_factor), width_(width_factor), fill_mode_(fill_mode), interpolation_(interpolation),
      fill_value_(fill_value) {}

ProjectiveTransform RandomTranslation::transformation(int64_t h, int64_t w, uint64_t seed, int64_t b) const {
  Rng rng = image_rng(seed, b);
  const float dy = uniform(rng, height_.lower, height_.upper) * static_cast<float>(h);
  const float dx = uniform(rng, width_.lower, width_.upper) * static_cast<float>(w);
  return {1.0f, 0.0f, -dx, 0.0f, 1.0f, -dy, 0.0f, 0.0f};
}

Tensor RandomTranslation::operator()(const Tensor& images, uint64_t seed, bool training) const {
  int64_t n, h, w;
  dims(images, name(), n, h, w);
  if (!training) return images;
  return transform_each(images, n, [&](int64_t b) { return transformation(h, w, seed, b); }, interpolation_,
                        fill_mode_, fill_value_);
}

RandomZoom::RandomZoom(Factor height_factor, std::optional<Factor> width_factor, FillMode fill_mode,
                       Interpolation interpolation, float fill_value)
    : height_(height_factor), width_(width_factor), fill_mode_(fill_mode), interpolation_(interpolation),
      fill_value_(fill_value) {}

ProjectiveTransform RandomZoom::transformation(int64_t h, int64_t w, uint64_t seed, int64_t b) const {
  Rng rng = image_rng(seed, b);
  const float zy = uniform(rng, 1.0f + height_.lower, 1.0f + height_.upper);
  const float zx = width_ ? uniform(rng, 1.0f + width_->lower, 1.0f + width_->upper) : zy;
  const float x_offset = (static_cast<float>(w) - 1.0f) / 2.0f * (1.0f - zx);
  const float y_offset = (static_cast<float>(h) - 1.0f) / 2.0f * (1.0f - zy);
  return {zx, 0.0f, x_offset, 0.0f, zy, y_offset, 0.0f, 0.0f};
}

Tensor RandomZoom::operator()(const Tensor& images, uint64_t seed, bool training) const {
  int64_t n, h, w;
  dims(images, name(), n, h, w);
  if (!training) return images;
  return transform_each(images, n, [&](int64_t b) { return transformation(h, w, seed, b); }, interpolation_,
                        fill_mode_, fill_value_);
}

// ---- RandomErasing -------------------------------------------------------------------------------

namespace {

bool in_unit_interval(RandomErasing::Range r) {
  return r.lower >= 0.0f && r.upper <= 1.0f && r.lower <= r.upper;  // false for NaN
}

}  // namespace

RandomErasing::RandomErasing(Factor factor, Range scale, std::optional<float> fill_value, Range value_range)
    : factor_{std::max(factor.lower, 0.0f), factor.upper},
      scale_{std::min(scale.lower, scale.upper), std::max(scale.lower, scale.upper)},
      fill_value_(fill_value),
      value_range_(value_range) {
  if (!in_unit_interval(factor_)) throw std::invalid_argument("RandomErasing: factor must be in [0, 1]");
  if (!in_unit_interval(scale_) || !(scale_.upper > 0.0f)) {
    throw std::invalid_argument("RandomErasing: scale must be two numbers in [0, 1], not both 0");
  }
  if (!(std::isfinite(value_range.lower) && std::isfinite(value_range.upper) && value_range.lower < value_range.upper)) {
    throw std::invalid_argument("RandomErasing: value_range must be finite [low, high] with low < high");
  }
  if (fill_value && !std::isfinite(*fill_value)) throw std::invalid_argument("RandomErasing: fill_value must be finite");
}

RandomErasing::Box RandomErasing::box(int64_t h, int64_t w, uint64_t seed, int64_t b) const {
  Rng rng = image_rng(seed, b);
  Box box;
  const float width = std::sqrt(uniform(rng, scale_.lower, scale_.upper)) * static_cast<float>(w);
  const float height = std::sqrt(uniform(rng, scale_.lower, scale_.upper)) * static_cast<float>(h);
  box.x0 = uniform(rng, 0.0f, 1.0f) * (static_cast<float>(w) - width);
  box.x1 = box.x0 + width;
  box.y0 = uniform(rng, 0.0f, 1.0f) * (static_cast<float>(h) - height);
  box.y1 = box.y0 + height;
  const float probability = uniform(rng, factor_.lower, factor_.upper);
  box.erase = uniform(rng, 0.0f, 1.0f) < probability;
  return box;
}

Tensor RandomErasing::operator()(const Tensor& images, uint64_t seed, bool training) const {
  int64_t n, h, w;
  dims(images, name(), n, h, w);
  if (!training) return images;
  Tensor out = Tensor::empty(images.shape());
  std::copy_n(images.data(), images.size(), out.data());
  const int64_t c = images.dim(images.rank() - 1);
  float* data = out.data();
  for (int64_t b = 0; b < n; ++b) {
    const Box e = box(h, w, seed, b);
    if (!e.erase) continue;
    Rng fill = image_rng(combine_keys(seed, 1), b);  // the noise: a stream of its own
    for (int64_t y = 0; y < h; ++y) {
      const auto fy = static_cast<float>(y);
      if (fy < e.y0 || fy >= e.y1) continue;
      for (int64_t x = 0; x < w; ++x) {
        const auto fx = static_cast<float>(x);
        if (fx < e.x0 || fx >= e.x1) continue;
        float* pixel = data + ((b * h + y) * w + x) * c;
        for (int64_t k = 0; k < c; ++k) {
          const float v = fill_value_ ? *fill_value_ : standard_normal(fill) * value_range_.upper;
          pixel[k] = std::clamp(v, value_range_.lower, value_range_.upper);
        }
      }
    }
  }
  return out;
}

// ---- Augmentation --------------------------------------------------------------------------------

Augmentation::Augmentation(std::vector<std::shared_ptr<const ImageLayer>> layers, uint64_t seed)
    : layers_(std::move(layers)), seed_(seed) {
  for (const auto& layer : layers_) {
    if (!layer) throw std::invalid_argument("Augmentation: a null layer");
  }
}

Tensor Augmentation::operator()(const Tensor& images, uint64_t seed, bool training) const {
  Tensor x = images;
  for (size_t i = 0; i < layers_.size(); ++i) x = (*layers_[i])(x, combine_keys(seed, i), training);
  return x;
}

uint64_t Augmentation::element_seed(const ElementKey& key) const {
  return combine_keys(combine_keys(seed_, key.iteration), static_cast<uint64_t>(key.index));
}

Element Augmentation::operator()(const Element& element, const ElementKey& key) const {
  if (element.empty()) throw std::invalid_argument("Augmentation: an element without components");
  HostScope host;
  Element out = element;
  out[0] = (*this)(element[0], element_seed(key), /*training=*/true);
  return out;
}

KeyedMapFunction Augmentation::map_function() const {
  return [self = *this](const Element& element, const ElementKey& key) { return self(element, key); };
}

// ---- the --augment grammar -----------------------------------------------------------------------

namespace {

constexpr const char* kGrammar =
    "expected comma-separated steps: flip[:horizontal|vertical|horizontal_and_vertical], crop:P (pixels), "
    "translate:F[:F], zoom:F[:F], erase[:F[:S0:S1]] (F in (0, 1], 0 <= S0 <= S1 <= 1), e.g. flip,crop:4";

[[noreturn]] void bad_step(const std::string& step, const std::string& why) {
  throw std::invalid_argument("bad augmentation step '" + quote_untrusted(step) + "': " + why + "; " + kGrammar);
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, separator)) parts.push_back(part);
  if (!text.empty() && text.back() == separator) parts.emplace_back();
  return parts;
}

float parse_number(const std::string& step, const std::string& text) {
  float f = 0.0f;
  try {
    size_t used = 0;
    f = std::stof(text, &used);
    if (used != text.size()) throw std::invalid_argument(text);
  } catch (const std::exception&) {
    bad_step(step, "'" + quote_untrusted(text) + "' is not a number");
  }
  return f;
}

float parse_factor(const std::string& step, const std::string& text) {
  const float f = parse_number(step, text);
  if (!(f > 0.0f && f <= 1.0f)) bad_step(step, "the factor " + quote_untrusted(text) + " is outside (0, 1]");
  return f;
}

int64_t parse_pixels(const std::string& step, const std::string& text, int64_t max) {
  int64_t p = 0;
  try {
    size_t used = 0;
    p = std::stoll(text, &used);
    if (used != text.size()) throw std::invalid_argument(text);
  } catch (const std::exception&) {
    bad_step(step, "'" + quote_untrusted(text) + "' is not a whole number of pixels");
  }
  if (p < 1 || p > max) bad_step(step, "the padding " + quote_untrusted(text) + " is outside [1, " + std::to_string(max) + "]");
  return p;
}

// erase[:F[:S0:S1]]
std::shared_ptr<const ImageLayer> parse_erase(const std::string& step, const std::vector<std::string>& parts,
                                              RandomErasing::Range value_range) {
  const size_t args = parts.size() - 1;
  if (args != 0 && args != 1 && args != 3) bad_step(step, "erase takes a factor, then optionally the scale's bounds: erase:F:S0:S1");
  const float factor = args == 0 ? 1.0f : parse_factor(step, parts[1]);
  RandomErasing::Range scale{0.02f, 0.33f};
  if (args == 3) {
    scale = {parse_number(step, parts[2]), parse_number(step, parts[3])};
    if (!(scale.lower >= 0.0f && scale.lower <= scale.upper && scale.upper <= 1.0f && scale.upper > 0.0f)) {
      bad_step(step, "the scale " + quote_untrusted(parts[2] + ":" + parts[3]) + " is not 0 <= S0 <= S1 <= 1 with S1 > 0");
    }
  }
  return std::make_shared<RandomErasing>(factor, scale, std::nullopt, value_range);
}

// One step's layers (crop:P is two).
std::vector<std::shared_ptr<const ImageLayer>> parse_step(const std::string& step, const Shape& shape,
                                                          RandomErasing::Range value_range) {
  const std::vector<std::string> parts = split(step, ':');
  const std::string& op = parts.empty() ? step : parts[0];
  const size_t args = parts.empty() ? 0 : parts.size() - 1;
  if (op == "flip") {
    if (args > 1) bad_step(step, "flip takes at most one mode");
    return {std::make_shared<RandomFlip>(args == 0 ? "horizontal" : parts[1])};
  }
  if (op == "crop") {
    if (args != 1) bad_step(step, "crop takes the padding in pixels, crop:P");
    const int64_t p = parse_pixels(step, parts[1], std::min(shape[0], shape[1]));
    return {std::make_shared<ZeroPadding2D>(p, p), std::make_shared<RandomCrop>(shape[0], shape[1])};
  }
  if (op == "translate" || op == "zoom") {
    if (args != 1 && args != 2) bad_step(step, op + " takes one factor, or two (height:width)");
    const float fh = parse_factor(step, parts[1]);
    const std::optional<float> fw = args == 2 ? std::optional<float>(parse_factor(step, parts[2])) : std::nullopt;
    if (op == "translate") return {std::make_shared<RandomTranslation>(fh, fw.value_or(fh))};
    return {std::make_shared<RandomZoom>(fh, fw ? std::optional<Factor>(*fw) : std::nullopt)};
  }
  if (op == "erase") return {parse_erase(step, parts, value_range)};
  bad_step(step, "unknown step '" + quote_untrusted(op) + "'");
}

}  // namespace

Augmentation Augmentation::parse(const std::string& spec, const Shape& image_shape, uint64_t seed,
                                 RandomErasing::Range value_range) {
  if (image_shape.size() != 3) {
    throw std::invalid_argument("augmentation needs image inputs (HxWxC), not " + shape_string(image_shape));
  }
  if (spec.empty()) throw std::invalid_argument(std::string("the augmentation is empty; ") + kGrammar);
  std::vector<std::shared_ptr<const ImageLayer>> layers;
  for (const std::string& step : split(spec, ',')) {
    if (step.empty()) bad_step(step, "an empty step");
    try {
      for (auto& layer : parse_step(step, image_shape, value_range)) layers.push_back(std::move(layer));
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      if (what.rfind("bad augmentation step", 0) == 0) throw;
      bad_step(step, what);  // a layer's own check (RandomFlip's mode)
    }
  }
  return Augmentation(std::move(layers), seed);
}

}  // namespace keel::preprocessing
