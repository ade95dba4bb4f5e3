#include "framework/core/shape.h"

#include <stdexcept>

#include "framework/core/limits.h"

namespace keel {

int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) {
    throw std::invalid_argument(std::string(what) + " overflows: " + std::to_string(a) + " * " + std::to_string(b) +
                                " does not fit in 64 bits");
  }
  return r;
}

int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) {
    throw std::invalid_argument(std::string(what) + " overflows: " + std::to_string(a) + " + " + std::to_string(b) +
                                " does not fit in 64 bits");
  }
  return r;
}

int64_t num_elements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n) || n > kMaxTensorElements || n < -kMaxTensorElements) {
      throw std::invalid_argument("shape " + shape_string(shape) + " has more than " +
                                  limit_string(kMaxTensorElements) +
                                  " elements, keel's limit for one tensor (see README \"Limits\")");
    }
  }
  return n;
}

int64_t num_bytes(const Shape& shape, int64_t element_bytes) {
  return checked_mul(num_elements(shape), element_bytes, "tensor bytes");
}

std::string shape_string(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += shape[i] < 0 ? std::string("None") : std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

const char* category_name(Category category) {
  switch (category) {
    case Category::parameters: return "parameters";
    case Category::gradients: return "gradients";
    case Category::optimizer: return "optimizer";
    case Category::activations: return "activations";
    case Category::inputs: return "inputs";
    case Category::workspace: return "workspace";
  }
  return "unknown";
}

}  // namespace keel
