// parallel_for for the CLI's host-side loops (exporting files, decoding the images `keel predict`
// classifies): fn(i) for i in [0, n) on the host's threads, in contiguous chunks. When calls throw,
// the error of the lowest index is rethrown, so that which bad input is reported does not depend on
// the threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

#include "framework/core/host_threads.h"

namespace keel::cli {

template <class Fn>
void parallel_for(int64_t n, Fn&& fn) {
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(host_threads(), n));
  // Each chunk stops at its first error; chunks are in index order, so the first error found in
  // chunk order is the lowest index's.
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      try {
        for (int64_t i = n * t / threads; i < n * (t + 1) / threads; ++i) fn(i);
      } catch (...) {
        errors[static_cast<size_t>(t)] = std::current_exception();
      }
    });
  }
  for (std::thread& th : pool) th.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace keel::cli
