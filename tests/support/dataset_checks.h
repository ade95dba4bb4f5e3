// Checks shared by the tests of framework/data's pipelines: a numbers source, bitwise comparison of
// element lists, exact resume at every position, rejected states, a deadlock guard.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/data/dataset.h"

namespace keel::testing {

// n elements {x (2,), y ()} with y = i and x = [i, -i], for i = start .. start + n - 1.
Dataset numbers(int64_t n, int64_t start = 0);
// Same length and, element by element, the same structure, shapes and bytes (strings too).
void expect_same(const std::vector<Element>& a, const std::vector<Element>& b, const std::string& what);
// Element y -> {x, y * 10}, after a delay that varies with y, so that parallel calls finish out of order.
Element slow_times_ten(const Element& e);
// For each k: advance k elements, save (through JSON text), restore into a fresh iterator (of
// `restore_into` if given), and check that the rest equals the uninterrupted run, bitwise.
void expect_exact_resume(const Dataset& ds, uint64_t iteration, const Dataset* restore_into = nullptr);
// `it.restore(state)` is refused as a state of another pipeline.
void expect_mismatch(Iterator& it, const nlohmann::json& state);
// Runs `body` on another thread and fails (ending the process: a deadlocked thread cannot be
// recovered) unless it finishes within `seconds`.
void within_seconds(int seconds, const std::function<void()>& body);

}  // namespace keel::testing
