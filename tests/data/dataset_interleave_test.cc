// interleave: tf.data's order, parallel workers that run ahead, errors, exact resume under any
// thread count, states of another cycle length refused.
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/data/data.h"
#include "framework/data/data_error.h"
#include "framework/data/dataset.h"
#include "tests/support/dataset_checks.h"
#include "tests/support/dataset_elements.h"

namespace keel {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using testing::all;
using testing::drain;
using testing::expect_exact_resume;
using testing::expect_mismatch;
using testing::expect_same;
using testing::numbers;
using testing::slow_times_ten;
using testing::values;
using testing::within_seconds;

// ---- interleave -------------------------------------------------------------------------------------

// Input elements y = start.. ; fn(y) = y repeated `repeats(y)` times, as a dataset.
Dataset repeated(int64_t y, int64_t times) {
  return Dataset::from_tensor_slices({Tensor::full({times}, static_cast<float>(y))});
}

TEST(InterleaveTest, TfDataOrder) {
  // tf.data's documented example: range(1, 6).interleave(lambda x: from_tensors(x).repeat(6),
  // cycle_length=2, block_length=4).
  const std::vector<float> expected = {1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3, 3,
                                       4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5};
  for (int64_t threads : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{8}, AUTOTUNE}) {
    const Dataset ds = numbers(5, 1).interleave(
        [](const Element& e) { return repeated(static_cast<int64_t>(e[1].item()), 6); }, 2, 4, threads);
    EXPECT_EQ(values(all(ds), 0), expected) << "threads " << threads;
    EXPECT_EQ(ds.cardinality(), kUnknownCardinality);
    EXPECT_EQ(ds.describe(), numbers(5, 1).describe() + " -> interleave(cycle_length=2, block_length=4)");
  }
  // Inner lengths 1, 2, 3, 4: an exhausted slot is refilled when the cycle comes back to it (the
  // order traced by hand through tf.data's InterleaveDatasetOp::GetNext).
  const auto by_length = [](const Element& e) {
    const auto y = static_cast<int64_t>(e[1].item());
    return repeated(y, y);
  };
  for (int64_t threads : {int64_t{0}, int64_t{2}, int64_t{8}}) {
    EXPECT_EQ(values(all(numbers(4, 1).interleave(by_length, 2, 1, threads)), 0),
              (std::vector<float>{1, 2, 2, 3, 3, 4, 3, 4, 4, 4}));
    EXPECT_EQ(values(all(numbers(4, 1).interleave(by_length, 1, 1, threads)), 0),
              (std::vector<float>{1, 2, 2, 3, 3, 3, 4, 4, 4, 4}));
  }
  EXPECT_THROW(numbers(3).interleave(by_length, 0), std::invalid_argument);
  EXPECT_THROW(numbers(3).interleave(by_length, 2, 0), std::invalid_argument);
  EXPECT_THROW(numbers(3).interleave(by_length, 2, 1, -7), std::invalid_argument);
}

TEST(InterleaveTest, ParallelRunsAheadAndResumesExactlyUnderAnyThreadCount) {
  // Inner datasets of varying lengths with slow elements, shuffled per iteration.
  const auto inner = [](const Element& e) {
    const auto y = static_cast<int64_t>(e[1].item());
    return numbers(2 + y % 5, 10 * y).shuffle(4, static_cast<uint64_t>(y)).map(slow_times_ten);
  };
  const Dataset sequential = numbers(9).shuffle(9, 1).interleave(inner, 3, 2);
  for (uint64_t iteration : {0, 1}) {
    const std::vector<Element> reference = all(sequential, iteration);
    ASSERT_EQ(reference.size(), 34u);  // the sum of 2 + y % 5 over y < 9
    for (int64_t threads : {int64_t{1}, int64_t{2}, int64_t{8}}) {
      const Dataset parallel = numbers(9).shuffle(9, 1).interleave(inner, 3, 2, threads);
      expect_same(all(parallel, iteration), reference, "threads " + std::to_string(threads));
    }
    const Dataset parallel = numbers(9).shuffle(9, 1).interleave(inner, 3, 2, 2);
    expect_exact_resume(parallel, iteration);
    expect_exact_resume(parallel, iteration, &sequential);  // a parallel state resumes sequentially
    expect_exact_resume(sequential, iteration, &parallel);
  }
}

TEST(InterleaveTest, WorkersAdvanceTheOpenInnerIterators) {
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::atomic<int> calls{0};
  const auto inner = [&](const Element& e) {
    return numbers(5).map([&](const Element& x) {
      {
        std::lock_guard lock(mu);
        ids.insert(std::this_thread::get_id());
      }
      ++calls;
      return x;
    });
  };
  Iterator it = numbers(4).interleave(inner, 2, 1, 2).make_iterator();
  ASSERT_TRUE(it.next());
  // Slot 0 is open and buffered ahead (2 elements), the consumer took one: 3 calls, none on this thread.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (calls < 3 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(calls.load(), 3);
  EXPECT_EQ(drain(it).size(), 19u);
  std::lock_guard lock(mu);
  EXPECT_EQ(ids.count(std::this_thread::get_id()), 0u);
  EXPECT_GE(ids.size(), 1u);
}

TEST(InterleaveTest, ErrorsPropagateAndEndTheIterator) {
  const auto inner = [](const Element& e) {
    const auto y = static_cast<int64_t>(e[1].item());
    return repeated(y, 3).map([](const Element& x) {
      if (x[0].item() == 2.0f) throw std::runtime_error("bad inner element");
      return x;
    });
  };
  for (int64_t threads : {int64_t{0}, int64_t{2}}) {
    Iterator it = numbers(4).interleave(inner, 2, 1, threads).make_iterator();
    // Order 0 1 0 1 0 1 then 2: the error comes at position 6.
    EXPECT_EQ(values(drain(it, 6), 0), (std::vector<float>{0, 1, 0, 1, 0, 1}));
    EXPECT_THROW(it.next(), std::runtime_error);
    EXPECT_THROW(it.next(), std::runtime_error);
  }
  Iterator bad_fn = numbers(3)
                        .interleave([](const Element&) -> Dataset { throw DataError("cannot open file"); }, 2, 1, 2)
                        .make_iterator();
  EXPECT_THROW(bad_fn.next(), DataError);
}

TEST(InterleaveTest, StatesFromAnotherCycleLengthAreRejected) {
  const auto inner = [](const Element& e) { return repeated(static_cast<int64_t>(e[1].item()), 3); };
  Iterator a = numbers(6).interleave(inner, 2, 1, 2).make_iterator();
  drain(a, 4);
  const json state = a.save();
  Iterator other = numbers(6).interleave(inner, 3, 1, 2).make_iterator();
  expect_mismatch(other, state);
  Iterator same = numbers(6).interleave(inner, 2, 1, 0).make_iterator();
  json bad = state;
  bad["state"]["slots"][0]["input_index"] = 5;  // more than the consumed input
  expect_mismatch(same, bad);
  bad = state;
  bad["state"]["slots"][0]["position"] = json::array({1, 2, 3});  // not a from_tensor_slices position
  expect_mismatch(same, bad);
  bad = state;
  bad["state"]["consumed"] = 40;
  expect_mismatch(same, bad);
  same.restore(state);
  EXPECT_EQ(same.produced(), 4);
}

}  // namespace
}  // namespace keel
