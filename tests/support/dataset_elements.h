// Reading datasets in tests: every element, one component's values, bitwise comparison.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/data/dataset.h"

namespace keel::testing {

// The elements `it` yields, at most `limit`.
std::vector<Element> drain(Iterator& it, int64_t limit = 1 << 20);
// Every element of iteration `iteration`.
std::vector<Element> all(const Dataset& ds, uint64_t iteration = 0);
// Component c of every element, concatenated (float components).
std::vector<float> values(const std::vector<Element>& elements, size_t c = 1);
// Component 0 of every element (string components).
std::vector<std::string> strings(const std::vector<Element>& elements);
// Same structure, shapes and bytes (float components).
bool bitwise_equal(const Element& a, const Element& b);

}  // namespace keel::testing
