#include "tests/support/thread_checks.h"

#include <gtest/gtest.h>

#include <cstring>

#include "framework/core/thread_pool.h"

namespace keel::testing {

void expect_same_bits_on_threads(const std::function<std::vector<Tensor>()>& compute, std::initializer_list<int> shares) {
  std::vector<std::vector<float>> first;
  for (int threads : shares) {
    const KernelThreadsScope share(threads);
    std::vector<std::vector<float>> values;
    for (const Tensor& t : compute()) values.push_back(t.to_vector());
    if (first.empty()) {
      first = std::move(values);
      continue;
    }
    ASSERT_EQ(values.size(), first.size());
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_EQ(values[i].size(), first[i].size()) << "output " << i;
      EXPECT_TRUE(values[i].empty() ||
                  std::memcmp(values[i].data(), first[i].data(), values[i].size() * sizeof(float)) == 0)
          << "output " << i << " differs on " << threads << " threads from " << *shares.begin();
    }
  }
}

}  // namespace keel::testing
