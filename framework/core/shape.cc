#include "framework/core/shape.h"

namespace keel {

int64_t num_elements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
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
