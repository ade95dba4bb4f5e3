// Test support for the thread pool: a computation run under several thread shares
// (framework/core/thread_pool.h) must give the same bits under each.
//
//   expect_same_bits_on_threads([&] { return std::vector<Tensor>{ops::matmul(a, b)}; });
//
// Reports through GoogleTest (non-fatal failures), naming the output and the thread count at fault.
#pragma once

#include <functional>
#include <initializer_list>
#include <vector>

#include "framework/core/tensor.h"

namespace keel::testing {

// Runs `compute` inside a KernelThreadsScope of each share and compares every output, bit for bit,
// with the first share's.
void expect_same_bits_on_threads(const std::function<std::vector<Tensor>()>& compute,
                                 std::initializer_list<int> shares = {1, 2, 3, 4});

}  // namespace keel::testing
