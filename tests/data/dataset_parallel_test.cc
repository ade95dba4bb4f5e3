// map_with_key (framework/data/dataset.cc sequentially, dataset_parallel.cc with threads): each
// element's key is (iteration, index in the map's input), on every thread count, and the index is
// part of the saved state, so sequential and parallel iterators resume each other exactly. And
// map-and-batch fusion (a parallel map followed by batch()): the batches, errors and saved states of
// the sequential map's batch().
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
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


// ---- map-and-batch fusion -------------------------------------------------------------------------

// Each id i becomes {a (3,) row of i, i², i + 0.5, an (2, 2) block of -i}; every third element takes
// longer, so that the workers finish out of order.
Element slow_rows(const Element& e) {
  const float i = e[0].item();
  if (static_cast<int64_t>(i) % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
  return {Tensor::from_vector({3}, std::vector<float>{i * i, i + 0.5f, -i}),
          Tensor::from_vector({2, 2}, std::vector<float>(4, -i))};
}

// What each next() of a batch iterator gives: the batch, or the error's message.
struct Outcome {
  std::optional<Element> batch;
  std::string error;
};
std::vector<Outcome> outcomes(Iterator& it, int64_t limit = 1000) {
  std::vector<Outcome> out;
  for (int64_t k = 0; k < limit; ++k) {
    try {
      std::optional<Element> b = it.next();
      if (!b) break;
      out.push_back({std::move(b), ""});
    } catch (const std::exception& e) {
      out.push_back({std::nullopt, e.what()});
    }
  }
  return out;
}
void expect_same(const std::vector<Outcome>& got, const std::vector<Outcome>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_EQ(got[k].error, want[k].error) << what << ", batch " << k;
    ASSERT_EQ(got[k].batch.has_value(), want[k].batch.has_value()) << what << ", batch " << k;
    if (got[k].batch) {
      EXPECT_TRUE(testing::bitwise_equal(*got[k].batch, *want[k].batch)) << what << ", batch " << k;
    }
  }
}

TEST(MapAndBatchFusionTest, BatchesAreTheSequentialMapsBatches) {
  for (int64_t n : {0, 1, 10, 37}) {
    for (int64_t size : {1, 3, 8}) {
      for (bool drop : {false, true}) {
        const Dataset input = ids(n).shuffle(64, 5);
        Iterator sequential = input.map(slow_rows).batch(size, drop).make_iterator(1);
        const std::vector<Outcome> want = outcomes(sequential);
        for (int64_t threads : {1, 2, 4}) {
          Iterator fused = input.map(slow_rows, threads).batch(size, drop).make_iterator(1);
          expect_same(outcomes(fused), want, std::to_string(n) + " elements in batches of " + std::to_string(size) +
                                                 (drop ? " dropping the remainder" : "") + ", " +
                                                 std::to_string(threads) + " threads");
        }
      }
    }
  }
}

TEST(MapAndBatchFusionTest, AnErrorEndsItsBatchAndTheNextBatchStartsAfterIt) {
  // Element 5's map throws: batch() has taken 4 and 5 when it rethrows, the next batch is 6..9.
  const auto failing = [](const Element& e) {
    if (e[0].item() == 5.0f) throw DataError("element 5 is broken");
    return slow_rows(e);
  };
  Iterator sequential = ids(23).map(failing).batch(4).make_iterator(0);
  const std::vector<Outcome> want = outcomes(sequential);
  ASSERT_EQ(want.size(), 7u);
  EXPECT_EQ(want[1].error, "element 5 is broken");
  EXPECT_EQ(want[2].batch->at(1).dim(0), 4);
  for (int64_t threads : {1, 3}) {
    Iterator fused = ids(23).map(failing, threads).batch(4).make_iterator(0);
    expect_same(outcomes(fused), want, std::to_string(threads) + " threads");
  }
}

TEST(MapAndBatchFusionTest, ElementsThatDoNotStackGiveBatchsError) {
  // Element 6 has a (4,) row where the others have (3,): batch()'s message names it; strings too.
  const auto ragged = [](const Element& e) {
    Element out = slow_rows(e);
    if (e[0].item() == 6.0f) out[0] = Tensor::from_vector({4}, std::vector<float>{1, 2, 3, 4});
    return out;
  };
  const auto text = [](const Element& e) { return Element{Tensor::from_string(std::to_string(e[0].item()))}; };
  for (const auto& [name, fn] : {std::pair<std::string, std::function<Element(const Element&)>>{"ragged", ragged},
                                 {"string", text}}) {
    Iterator sequential = ids(12).map(fn).batch(4).make_iterator(0);
    const std::vector<Outcome> want = outcomes(sequential);
    ASSERT_FALSE(want[name == "ragged" ? 1 : 0].error.empty()) << name;
    Iterator fused = ids(12).map(fn, 2).batch(4).make_iterator(0);
    expect_same(outcomes(fused), want, name);
  }
}

TEST(MapAndBatchFusionTest, StatesSavedBetweenBatchesResumeEitherWay) {
  const Dataset input = ids(50).shuffle(50, 11);
  Iterator whole = input.map(slow_rows).batch(6).make_iterator(3);
  const std::vector<Outcome> want = outcomes(whole);
  for (int64_t at : {0, 1, 4, 8}) {
    for (int64_t saved_threads : {0, 3}) {
      Iterator it = input.map(slow_rows, saved_threads).batch(6).make_iterator(3);
      outcomes(it, at);
      const nlohmann::json state = it.save();
      for (int64_t threads : {0, 2}) {
        Iterator resumed = input.map(slow_rows, threads).batch(6).make_iterator(3);
        resumed.restore(state);
        const std::vector<Outcome> rest = outcomes(resumed);
        expect_same(rest, std::vector<Outcome>(want.begin() + at, want.end()),
                    "saved after " + std::to_string(at) + " batches on " + std::to_string(saved_threads) +
                        " threads, resumed on " + std::to_string(threads));
      }
    }
  }
}

}  // namespace
}  // namespace keel
