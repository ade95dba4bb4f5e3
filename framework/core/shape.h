// Shapes, dtype sizes and the memory categories every byte on a core is charged to.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace keel {

using Shape = std::vector<int64_t>;

// Number of elements; 1 for a scalar (empty shape). Overflow-checked: a product past
// kMaxTensorElements (core/limits.h) in magnitude is a std::invalid_argument naming the shape and the
// limit, never a wrapped value. (A -1 dimension, "unknown", counts with its sign.)
int64_t num_elements(const Shape& shape);
// Bytes of a tensor of `shape` with `element_bytes` per element, overflow-checked as num_elements.
int64_t num_bytes(const Shape& shape, int64_t element_bytes);

// a * b and a + b, or std::invalid_argument "<what> overflows: a * b" where int64 cannot hold the
// result. The one helper for every size computed from user values (batch x cores, batch x input...).
int64_t checked_mul(int64_t a, int64_t b, const char* what);
int64_t checked_add(int64_t a, int64_t b, const char* what);
// "(16, 784)" — Keras's way of printing a shape; "None" stands for a -1 (unknown) dimension.
std::string shape_string(const Shape& shape);

// Ledger categories (contract: these names appear in `keel memory --json`).
enum class Category : int { parameters = 0, gradients, optimizer, activations, inputs, workspace };
inline constexpr int kNumCategories = 6;
const char* category_name(Category category);

}  // namespace keel
