// Shapes, dtype sizes and the memory categories every byte on a core is charged to.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace keel {

using Shape = std::vector<int64_t>;

// Number of elements; 1 for a scalar (empty shape).
int64_t num_elements(const Shape& shape);
// "(16, 784)" — Keras's way of printing a shape; "None" stands for a -1 (unknown) dimension.
std::string shape_string(const Shape& shape);

// Ledger categories (contract: these names appear in `keel memory --json`).
enum class Category : int { parameters = 0, gradients, optimizer, activations, inputs, workspace };
inline constexpr int kNumCategories = 6;
const char* category_name(Category category);

}  // namespace keel
