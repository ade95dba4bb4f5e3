#include "tests/support/dataset_checks.h"

#include <chrono>
#include <cstring>
#include <future>
#include <iostream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/data/data_error.h"
#include "tests/support/dataset_elements.h"

namespace keel::testing {

// n elements {x (2,), y ()} with y = i and x = [i, -i].
Dataset numbers(int64_t n, int64_t start) {
  std::vector<float> x;
  std::vector<float> y;
  for (int64_t i = start; i < start + n; ++i) {
    const auto f = static_cast<float>(i);
    x.insert(x.end(), {f, -f});
    y.push_back(f);
  }
  return Dataset::from_tensor_slices({Tensor::from_vector({n, 2}, x), Tensor::from_vector({n}, y)});
}

namespace {

bool equal(const Element& a, const Element& b) {
  if (a.size() != b.size()) return false;
  for (size_t c = 0; c < a.size(); ++c) {
    if (a[c].is_string() != b[c].is_string()) return false;
    if (a[c].is_string()) {
      if (a[c].string_value() != b[c].string_value()) return false;
      continue;
    }
    if (a[c].shape() != b[c].shape()) return false;
    if (std::memcmp(a[c].data(), b[c].data(), static_cast<size_t>(a[c].bytes())) != 0) return false;
  }
  return true;
}

}  // namespace

void expect_same(const std::vector<Element>& a, const std::vector<Element>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) ASSERT_TRUE(equal(a[i], b[i])) << what << ", element " << i;
}

// Element y -> {x, y * 10}, after a delay that varies with y, so that parallel calls finish out of order.
Element slow_times_ten(const Element& e) {
  const auto y = static_cast<int64_t>(e[1].item());
  std::this_thread::sleep_for(std::chrono::microseconds(((y * 7919) % 5) * 200));
  return {e[0], Tensor::scalar(e[1].item() * 10.0f)};
}

// For each k: advance k elements, save (through JSON text), restore into a fresh iterator, and check
// that the rest equals the uninterrupted run, bitwise.
void expect_exact_resume(const Dataset& ds, uint64_t iteration, const Dataset* restore_into) {
  const std::vector<Element> reference = all(ds, iteration);
  ASSERT_GT(reference.size(), 2u);
  for (int64_t k = 0; k <= static_cast<int64_t>(reference.size()); ++k) {
    SCOPED_TRACE("k = " + std::to_string(k) + ", iteration " + std::to_string(iteration) + ", " + ds.describe());
    Iterator a = ds.make_iterator(iteration);
    ASSERT_EQ(static_cast<int64_t>(drain(a, k).size()), k);
    const std::string text = a.save().dump();
    EXPECT_LT(text.size(), 4000u) << text;
    Iterator b = (restore_into ? *restore_into : ds).make_iterator(iteration);
    b.restore(nlohmann::json::parse(text));
    EXPECT_EQ(b.produced(), k);
    const std::vector<Element> rest = drain(b);
    const std::vector<Element> expected(reference.begin() + k, reference.end());
    expect_same(rest, expected, "restored");
  }
}

void expect_mismatch(Iterator& it, const nlohmann::json& state) {
  try {
    it.restore(state);
    ADD_FAILURE() << "accepted " << state.dump();
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("iterator state does not match this dataset pipeline"));
  }
}

// Runs `body` on another thread and fails (ending the process: a deadlocked thread cannot be
// recovered) unless it finishes within `seconds`.
void within_seconds(int seconds, const std::function<void()>& body) {
  std::packaged_task<void()> task(body);
  std::future<void> done = task.get_future();
  std::thread t(std::move(task));
  if (done.wait_for(std::chrono::seconds(seconds)) != std::future_status::ready) {
    std::cerr << "deadlock: the test body did not finish within " << seconds << " s\n";
    std::_Exit(1);
  }
  t.join();
  done.get();
}

}  // namespace keel::testing
