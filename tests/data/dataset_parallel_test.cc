// map_with_key (framework/data/dataset.cc sequentially, dataset_parallel.cc with threads): each
// element's key is (iteration, index in the map's input), on every thread count, and the index is
// part of the saved state, so sequential and parallel iterators resume each other exactly.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "framework/data/data_error.h"
#include "framework/data/dataset.h"
#include "tests/support/dataset_elements.h"

namespace keel {
namespace {

using ::testing::HasSubstr;

Dataset ids(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i);
  return Dataset::from_tensor_slices({Tensor::from_vector({n}, v)});
}

// Each element becomes {id, iteration, index}.
Element with_key(const Element& e, const ElementKey& key) {
  return {e[0], Tensor::scalar(static_cast<float>(key.iteration)), Tensor::scalar(static_cast<float>(key.index))};
}

TEST(KeyedMapTest, KeysAreTheIterationAndTheIndexInTheInput) {
  const Dataset shuffled = ids(20).shuffle(20, 3);
  for (int64_t threads : {0, 1, 3}) {
    for (uint64_t iteration : {0u, 5u}) {
      const std::vector<Element> out = testing::all(shuffled.map_with_key(with_key, threads), iteration);
      const std::vector<Element> plain = testing::all(shuffled, iteration);
      ASSERT_EQ(out.size(), 20u);
      for (size_t i = 0; i < out.size(); ++i) {
        EXPECT_EQ(out[i][0].to_vector(), plain[i][0].to_vector());  // the shuffled order, unchanged
        EXPECT_EQ(out[i][1].item(), static_cast<float>(iteration));
        EXPECT_EQ(out[i][2].item(), static_cast<float>(i)) << threads << " threads";
      }
    }
  }
  // Under repeat, each repetition is its own sub-iteration, indices counted from 0 again.
  const std::vector<Element> repeated = testing::all(ids(3).map_with_key(with_key).repeat(2), 1);
  ASSERT_EQ(repeated.size(), 6u);
  EXPECT_EQ(repeated[3][1].item(), 3.0f);  // iteration 1 of a repeat(2): sub-iterations 2 and 3
  EXPECT_EQ(repeated[3][2].item(), 0.0f);
  EXPECT_THAT(ids(3).map_with_key(with_key, 2).describe(), HasSubstr("-> map(keyed)"));
  EXPECT_THAT(ids(3).map([](const Element& e) { return e; }, 2).describe(), ::testing::EndsWith("-> map"));
}

TEST(KeyedMapTest, StatesCarryTheIndexAndResumeUnderAnyThreadCount) {
  const Dataset input = ids(30).shuffle(30, 7);
  const std::vector<Element> want = testing::all(input.map_with_key(with_key), 2);
  for (int64_t saved_threads : {0, 2}) {
    for (int64_t at : {0, 1, 13, 30}) {
      Iterator it = input.map_with_key(with_key, saved_threads).make_iterator(2);
      testing::drain(it, at);
      const nlohmann::json state = it.save();
      EXPECT_EQ(state.at("state").at("index"), at) << state.dump();
      for (int64_t threads : {0, 1, 4}) {
        Iterator resumed = input.map_with_key(with_key, threads).make_iterator(2);
        resumed.restore(state);
        const std::vector<Element> rest = testing::drain(resumed);
        ASSERT_EQ(rest.size(), static_cast<size_t>(30 - at));
        for (size_t i = 0; i < rest.size(); ++i) {
          EXPECT_TRUE(testing::bitwise_equal(rest[i], want[static_cast<size_t>(at) + i]))
              << "saved with " << saved_threads << " threads at " << at << ", resumed with " << threads;
        }
      }
    }
  }
  // A plain map's state has no index, and is refused by a keyed map (and the other way round).
  Iterator plain = input.map([](const Element& e) { return e; }).make_iterator(2);
  EXPECT_THROW(input.map_with_key(with_key).make_iterator(2).restore(plain.save()), DataError);
}

TEST(KeyedMapTest, NondeterministicKeyedMapKeysEachElementByItsInputIndex) {
  const std::vector<Element> out = testing::all(ids(40).map_with_key(with_key, 4, /*deterministic=*/false), 1);
  ASSERT_EQ(out.size(), 40u);
  for (const Element& e : out) EXPECT_EQ(e[0].item(), e[2].item());  // unshuffled: id == index
}

}  // namespace
}  // namespace keel
