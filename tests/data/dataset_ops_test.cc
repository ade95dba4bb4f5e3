// from_generator, list_files, filter, skip, cache, map(fn, num_parallel_calls): elements,
// tf.data's orders and cardinalities, determinism under any thread count, exact resume.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <memory>
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
#include "framework/data/dataset_node.h"
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
using testing::strings;
using testing::values;
using testing::within_seconds;


// The numbers of a file as elements {v, v}, read lazily line by line: each iterator opens the file anew.
Dataset read_lines(const Element& file) {
  const std::string path = file.at(0).string_value();
  return Dataset::from_generator([path](uint64_t) -> Generator {
    auto in = std::make_shared<std::ifstream>(path);
    if (!*in) throw DataError("cannot open " + path);
    return [in]() -> std::optional<Element> {
      float v = 0;
      if (!(*in >> v)) return std::nullopt;
      return Element{Tensor::scalar(v), Tensor::scalar(v)};
    };
  });
}

std::string file_name(int f) {
  std::string name = "f";
  name += std::to_string(f);
  name += ".txt";
  return name;
}

// A temporary directory with files f0.txt .. f{n-1}.txt; file f holds lines "100 f + i" for
// i < 3 + f % 4, plus notes.dat, which *.txt must not match.
class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("keel_dataset_ops_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    for (int f = 0; f < kFiles; ++f) {
      std::ofstream out(dir_ / file_name(f));
      for (int i = 0; i < 3 + f % 4; ++i) out << 100 * f + i << "\n";
    }
    std::ofstream(dir_ / "notes.dat") << "not a number file\n";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string pattern() const { return (dir_ / "*.txt").string(); }

  static constexpr int kFiles = 6;
  std::filesystem::path dir_;
};

// ---- from_generator ---------------------------------------------------------------------------------

TEST(FromGeneratorTest, YieldsTheGeneratorsElementsPerIteration) {
  std::atomic<int> factories{0};
  const Dataset ds = Dataset::from_generator([&](uint64_t iteration) -> Generator {
    ++factories;
    auto i = std::make_shared<int64_t>(0);
    return [i, iteration]() -> std::optional<Element> {
      if (*i == 4) return std::nullopt;
      return Element{Tensor::scalar(static_cast<float>(100 * iteration + (*i)++))};
    };
  });
  EXPECT_EQ(ds.cardinality(), kUnknownCardinality);
  EXPECT_EQ(ds.describe(), "from_generator");
  EXPECT_EQ(values(all(ds, 0), 0), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(values(all(ds, 2), 0), (std::vector<float>{200, 201, 202, 203}));
  EXPECT_EQ(factories.load(), 2);
  Iterator unused = ds.make_iterator();
  EXPECT_EQ(factories.load(), 2) << "the factory runs on the first next(), not before";
  EXPECT_EQ(values(all(data::from_generator([](uint64_t) -> Generator {
                         return [] { return std::optional<Element>(); };
                       })))
                .size(),
            0u);
  for (uint64_t iteration : {0, 1}) expect_exact_resume(ds, iteration);
  // Restoring past the generator's end: the state cannot come from this dataset.
  Iterator it = ds.make_iterator();
  json state = it.save();
  state["state"]["index"] = 5;
  expect_mismatch(it, state);
}

// ---- list_files -------------------------------------------------------------------------------------

TEST_F(FilesTest, ListFilesSortedOrShuffledPerIteration) {
  std::vector<std::string> sorted;
  for (int f = 0; f < kFiles; ++f) sorted.push_back((dir_ / file_name(f)).string());

  const Dataset plain = Dataset::list_files(pattern(), /*shuffle=*/false);
  EXPECT_EQ(strings(all(plain)), sorted);
  EXPECT_EQ(plain.cardinality(), kFiles);
  EXPECT_EQ(plain.describe(), "list_files(patterns=[" + json(pattern()).dump() + "], files=6)");
  // Several patterns: the union, sorted, each file once.
  EXPECT_EQ(strings(all(data::list_files(std::vector<std::string>{pattern(), (dir_ / "f0.*").string()}, false))),
            sorted);

  const Dataset shuffled = data::list_files(pattern(), /*shuffle=*/true, /*seed=*/3);
  EXPECT_EQ(shuffled.cardinality(), kFiles);
  std::set<std::vector<std::string>> orders;
  for (uint64_t iteration = 0; iteration < 4; ++iteration) {
    const std::vector<std::string> order = strings(all(shuffled, iteration));
    EXPECT_EQ(order, strings(all(shuffled, iteration))) << "same seed and iteration, same order";
    std::vector<std::string> s = order;
    std::sort(s.begin(), s.end());
    EXPECT_EQ(s, sorted);
    orders.insert(order);
  }
  EXPECT_GE(orders.size(), 3u) << "reshuffled each iteration";
  EXPECT_NE(strings(all(shuffled)), strings(all(Dataset::list_files(pattern(), true, 4))));
  EXPECT_EQ(strings(all(Dataset::list_files(pattern()))), strings(all(Dataset::list_files(pattern(), true, 0))))
      << "no seed means seed 0";
}

TEST_F(FilesTest, ListFilesWithoutAMatchNamesThePattern) {
  const std::string missing = (dir_ / "*.tfrecord").string();
  try {
    Dataset::list_files(missing);
    FAIL() << "no file matches";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("no files match pattern \"" + missing + "\""));
  }
  EXPECT_THROW(Dataset::list_files("/nonexistent_keel_dir/*.txt"), DataError);
}

TEST_F(FilesTest, BatchingStringsIsAClearError) {
  Iterator it = Dataset::list_files(pattern(), false).batch(2).make_iterator();
  try {
    it.next();
    FAIL() << "batched string tensors";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("batch(): component 0 is a string; decode it with map() before batching"));
  }
}

// ---- filter / skip ---------------------------------------------------------------------------------

TEST(FilterTest, KeepsMatchingElements) {
  const Dataset evens = numbers(10).filter([](const Element& e) { return static_cast<int>(e[1].item()) % 2 == 0; });
  EXPECT_EQ(values(all(evens)), (std::vector<float>{0, 2, 4, 6, 8}));
  EXPECT_EQ(evens.cardinality(), kUnknownCardinality);
  EXPECT_EQ(evens.describe(), numbers(10).describe() + " -> filter");
  EXPECT_TRUE(all(numbers(5).filter([](const Element&) { return false; })).empty());
  expect_exact_resume(numbers(30).shuffle(8, 2).filter([](const Element& e) { return e[1].item() > 9; }), 1);
}

TEST(SkipTest, SkipsAndCountsAsTfData) {
  EXPECT_EQ(values(all(numbers(6).skip(4))), (std::vector<float>{4, 5}));
  EXPECT_EQ(values(all(numbers(6).skip(0))), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_TRUE(all(numbers(6).skip(10)).empty());
  EXPECT_TRUE(all(numbers(6).skip(-1)).empty());
  EXPECT_EQ(numbers(6).skip(4).cardinality(), 2);
  EXPECT_EQ(numbers(6).skip(10).cardinality(), 0);
  EXPECT_EQ(numbers(6).skip(-1).cardinality(), 0);
  EXPECT_EQ(numbers(6).repeat().skip(3).cardinality(), kInfiniteCardinality);
  EXPECT_EQ(numbers(6).filter([](const Element&) { return true; }).skip(3).cardinality(), kUnknownCardinality);
  EXPECT_EQ(values(all(numbers(3).repeat().skip(2).take(4))), (std::vector<float>{2, 0, 1, 2}));
  EXPECT_THROW(numbers(3).skip(-2), std::invalid_argument);
  expect_exact_resume(numbers(20).shuffle(5, 1).skip(7).batch(3), 2);
}

// ---- cache ------------------------------------------------------------------------------------------

TEST(CacheTest, TheFirstCompleteIterationFillsItAndLaterOnesReadIt) {
  auto calls = std::make_shared<std::atomic<int>>(0);
  const auto counted = [calls](const Element& e) {
    ++*calls;
    return e;
  };
  const Dataset ds = numbers(10).shuffle(10, 5).map(counted).cache();
  EXPECT_EQ(ds.cardinality(), 10);
  EXPECT_EQ(ds.describe(), numbers(10).shuffle(10, 5).map(counted).describe() + " -> cache");

  {
    Iterator partial = ds.make_iterator(0);
    drain(partial, 4);
  }  // abandoned: discarded, as tf.data
  EXPECT_EQ(calls->load(), 4);
  const std::vector<float> first = values(all(ds, 1));  // iteration 1 fills the cache
  EXPECT_EQ(calls->load(), 14);
  EXPECT_EQ(first, values(all(numbers(10).shuffle(10, 5), 1)));
  EXPECT_EQ(values(all(ds, 0)), first) << "later iterations read the cache, not their own shuffle";
  EXPECT_EQ(values(all(ds, 7)), first);
  EXPECT_EQ(calls->load(), 14) << "reading the cache runs nothing upstream";
}

TEST(CacheTest, ResumesInAFreshProcessByReplayingTheFillingIteration) {
  const auto build = [] { return numbers(12).shuffle(12, 8).map(slow_times_ten, 2).cache().batch(5); };
  const Dataset old_process = build();
  const std::vector<Element> filled = all(old_process, 1);  // filled by iteration 1
  ASSERT_EQ(filled.size(), 3u);
  Iterator reading = old_process.make_iterator(4);
  drain(reading, 1);
  const json read_state = reading.save();
  EXPECT_EQ(read_state["state"]["input"]["mode"], "read");
  EXPECT_EQ(read_state["state"]["input"]["filled_by"], 1);

  const Dataset new_process = build();  // an empty cache
  Iterator resumed = new_process.make_iterator(4);
  resumed.restore(read_state);
  expect_same(drain(resumed), {filled.begin() + 1, filled.end()}, "cache read resume");
  // The replay filled the new cache, with iteration 1's elements.
  expect_same(all(new_process, 9), filled, "refilled cache");

  // An iterator saved while filling resumes filling, and completes the cache.
  const Dataset fresh = build();
  const std::vector<Element> order2 = all(build().take(-1), 2);
  for (int64_t k : {0, 1, 2, 3}) {
    const Dataset ds = build();
    Iterator a = ds.make_iterator(2);
    drain(a, k);
    const json state = a.save();
    EXPECT_EQ(state["state"]["input"]["mode"], "fill");
    const Dataset other = build();
    Iterator b = other.make_iterator(2);
    b.restore(state);
    expect_same(drain(b), {order2.begin() + k, order2.end()}, "cache fill resume k=" + std::to_string(k));
    expect_same(all(other, 0), order2, "cache completed by the restored iterator");
  }
  Iterator wrong = fresh.make_iterator(3);
  Iterator filling = fresh.make_iterator(2);
  drain(filling, 1);
  json fill_state = filling.save();
  fill_state["iteration"] = 3;
  expect_mismatch(wrong, fill_state);  // filled_by 2 != iteration 3
}

// ---- map(fn, num_parallel_calls) -------------------------------------------------------------------

TEST(ParallelMapTest, SameElementsAsSequentialOnEveryThreadCount) {
  const Dataset input = numbers(60).shuffle(16, 3);
  const std::vector<Element> sequential = all(input.map(slow_times_ten), 1);
  for (int64_t threads : {int64_t{1}, int64_t{2}, int64_t{8}, AUTOTUNE}) {
    const Dataset ds = input.map(slow_times_ten, threads);
    EXPECT_EQ(ds.describe(), input.map(slow_times_ten).describe()) << "thread counts stay out of describe()";
    EXPECT_EQ(ds.cardinality(), 60);
    expect_same(all(ds, 1), sequential, "threads " + std::to_string(threads));
  }
  EXPECT_THROW(input.map(slow_times_ten, -5), std::invalid_argument);
}

std::vector<float> sorted_values(const std::vector<Element>& elements) {
  std::vector<float> v = values(elements);
  std::sort(v.begin(), v.end());
  return v;
}

TEST(ParallelMapTest, NondeterministicReturnsElementsAsTheyComplete) {
  // Element 0 is slow: with deterministic = false the others overtake it.
  const auto slow_first = [](const Element& e) {
    if (e[1].item() == 0.0f) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return e;
  };
  const Dataset ds = numbers(8).map(slow_first, 4, /*deterministic=*/false);
  EXPECT_EQ(ds.describe(), numbers(8).describe() + " -> map(deterministic=false)");
  const std::vector<float> order = values(all(ds));
  EXPECT_NE(order.front(), 0.0f);
  EXPECT_EQ(sorted_values(all(ds)), (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(values(all(numbers(8).map(slow_first, 4, /*deterministic=*/true))), (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(ParallelMapTest, NondeterministicStatesResumeWithExactlyTheRemainingElements) {
  // Random-ish delays; the head and the restored rest together hold every element exactly once.
  const Dataset input = numbers(40).shuffle(16, 3);
  const std::vector<float> everything = sorted_values(all(input.map(slow_times_ten), 1));
  for (int64_t threads : {int64_t{2}, int64_t{8}}) {
    const Dataset ds = input.map(slow_times_ten, threads, /*deterministic=*/false).prefetch(2);
    for (int64_t k : {0, 1, 3, 9, 20, 39, 40}) {
      SCOPED_TRACE("threads " + std::to_string(threads) + ", k = " + std::to_string(k));
      Iterator a = ds.make_iterator(1);
      std::vector<Element> seen = drain(a, k);
      const json state = json::parse(a.save().dump());
      Iterator b = ds.make_iterator(1);
      b.restore(state);
      const std::vector<Element> rest = drain(b);
      seen.insert(seen.end(), rest.begin(), rest.end());
      EXPECT_EQ(sorted_values(seen), everything) << state.dump();
      // Restoring twice (a restored iterator saved again before reading) changes nothing.
      Iterator c = ds.make_iterator(1);
      c.restore(state);
      Iterator d = ds.make_iterator(1);
      d.restore(c.save());
      EXPECT_EQ(sorted_values(drain(d)), sorted_values(rest));
    }
  }
  // A deterministic state does not fit the nondeterministic pipeline.
  Iterator det = input.map(slow_times_ten, 2).make_iterator(1);
  drain(det, 2);
  Iterator nondet = input.map(slow_times_ten, 2, false).make_iterator(1);
  expect_mismatch(nondet, det.save());
}

TEST(ParallelMapTest, RunsOnWorkerThreadsAhead) {
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::atomic<int> calls{0};
  const Dataset ds = numbers(40).map(
      [&](const Element& e) {
        {
          std::lock_guard lock(mu);
          ids.insert(std::this_thread::get_id());
        }
        ++calls;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        return e;
      },
      4);
  Iterator it = ds.make_iterator();
  ASSERT_TRUE(it.next());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (calls < 17 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(calls.load(), 17) << "one element returned and 4 per thread (16) in flight, no more";
  drain(it);
  EXPECT_GE(ids.size(), 2u);
  EXPECT_EQ(ids.count(std::this_thread::get_id()), 0u) << "fn runs on the pool";
}

TEST(ParallelMapTest, AnExceptionComesAtItsElementsPosition) {
  const Dataset ds = numbers(10).map(
      [](const Element& e) {
        if (e[1].item() == 6.0f) throw std::runtime_error("bad element 6");
        return slow_times_ten(e);
      },
      4);
  Iterator it = ds.make_iterator();
  EXPECT_EQ(values(drain(it, 6)), (std::vector<float>{0, 10, 20, 30, 40, 50}));
  try {
    it.next();
    FAIL() << "the error was swallowed";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "bad element 6");
  }
  EXPECT_EQ(values(drain(it)), (std::vector<float>{70, 80, 90})) << "then it continues, as the sequential map";
}

// ---- a source written against dataset_node.h ---------------------------------------------------------

// Elements {v, v} with v = iteration * 1000 + i for i < n_: the smallest source that follows the node contract.
class CountNode final : public DatasetNode {
 public:
  explicit CountNode(int64_t n) : n_(n) {}
  std::unique_ptr<IteratorNode> make_iterator(uint64_t iteration) const override {
    return std::make_unique<It>(*this, iteration);
  }
  int64_t cardinality() const override { return n_; }
  std::string describe() const override { return "count(" + std::to_string(n_) + ")"; }
  json state_json(const Position& words, size_t& at) const override {
    return {{"op", "count"}, {"index", take_int(words, at)}};
  }

 private:
  class It final : public IteratorNode {
   public:
    It(const CountNode& node, uint64_t iteration) : node_(node), iteration_(iteration) {}
    std::optional<Element> next() override {
      if (index_ >= node_.n_) return std::nullopt;
      const auto v = static_cast<float>(iteration_ * 1000 + static_cast<uint64_t>(index_++));
      return Element{Tensor::scalar(v), Tensor::scalar(v)};
    }
    void save(Position& out) const override { out.push_back(static_cast<uint64_t>(index_)); }
    void restore(const json& state) override { index_ = int_field(state, "count", "index", 0, node_.n_); }

   private:
    const CountNode& node_;
    uint64_t iteration_;
    int64_t index_ = 0;
  };
  int64_t n_;
};

TEST(FromNodeTest, ASourceFromAnotherFileWorksWithEveryOp) {
  const Dataset source = Dataset::from_node(std::make_shared<CountNode>(12));
  EXPECT_EQ(source.cardinality(), 12);
  EXPECT_EQ(values(all(source.skip(10), 2), 0), (std::vector<float>{2010, 2011}));
  const Dataset ds = source.shuffle(5, 1).map(slow_times_ten, 2).batch(5).prefetch(2);
  EXPECT_EQ(ds.describe().rfind("count(12) -> shuffle", 0), 0u);
  for (uint64_t iteration : {0, 1}) expect_exact_resume(ds, iteration);
  EXPECT_THROW(Dataset::from_node(nullptr), std::invalid_argument);
}

// ---- Iterator::snapshot ----------------------------------------------------------------------------

TEST(SnapshotTest, SavesThePositionItWasTakenAt) {
  const Dataset ds = numbers(30).shuffle(8, 1).map(slow_times_ten, 2).batch(4).prefetch(2);
  Iterator it = ds.make_iterator(1);
  drain(it, 2);
  const json expected = it.save();
  const Iterator::Snapshot snap = it.snapshot();
  drain(it, 3);  // run ahead
  EXPECT_EQ(it.save(snap), expected);
  Iterator resumed = ds.make_iterator(1);
  resumed.restore(it.save(snap));
  EXPECT_EQ(resumed.produced(), 2);
  const std::vector<Element> reference = all(ds, 1);
  expect_same(drain(resumed), std::vector<Element>(reference.begin() + 2, reference.end()), "from snapshot");
  EXPECT_THROW(it.save(Iterator::Snapshot()), std::invalid_argument);
  EXPECT_THROW(ds.make_iterator(2).save(snap), std::invalid_argument);
}

// ---- a whole file pipeline --------------------------------------------------------------------------

Dataset file_pipeline(const std::string& pattern, int64_t threads, uint64_t seed = 3) {
  return Dataset::list_files(pattern, /*shuffle=*/true, seed)
      .interleave(read_lines, 2, 1, threads)
      .map(slow_times_ten, threads)
      .filter([](const Element& e) { return static_cast<int64_t>(e[0].item()) % 3 != 0; })
      .shuffle(8, 5)
      .batch(3)
      .prefetch(2);
}

// Every file's numbers, times ten, less the multiples of 3 (before scaling).
std::vector<float> expected_numbers(int files) {
  std::vector<float> out;
  for (int f = 0; f < files; ++f) {
    for (int i = 0; i < 3 + f % 4; ++i) {
      if ((100 * f + i) % 3 != 0) out.push_back(static_cast<float>(10 * (100 * f + i)));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST_F(FilesTest, PipelineIsDeterministicUnderAnyThreadCount) {
  for (uint64_t iteration : {0, 1}) {
    const std::vector<Element> reference = all(file_pipeline(pattern(), 0), iteration);
    std::vector<float> got = values(reference);
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, expected_numbers(kFiles));
    for (int64_t threads : {int64_t{1}, int64_t{2}, int64_t{8}}) {
      expect_same(all(file_pipeline(pattern(), threads), iteration), reference,
                  "threads " + std::to_string(threads) + ", iteration " + std::to_string(iteration));
    }
  }
  EXPECT_NE(values(all(file_pipeline(pattern(), 2), 0)), values(all(file_pipeline(pattern(), 2), 1)));
  EXPECT_EQ(file_pipeline(pattern(), 2).cardinality(), kUnknownCardinality);
}

TEST_F(FilesTest, PipelineResumesExactlyAtEveryPosition) {
  const Dataset ds = file_pipeline(pattern(), 2);
  const Dataset one_thread = file_pipeline(pattern(), 1);
  const Dataset eight_threads = file_pipeline(pattern(), 8);
  for (uint64_t iteration : {0, 1}) {
    expect_exact_resume(ds, iteration);
    expect_exact_resume(eight_threads, iteration, &one_thread);
  }
  Iterator a = ds.make_iterator(1);
  drain(a, 2);
  const json state = a.save();
  Iterator other_seed = file_pipeline(pattern(), 2, /*seed=*/4).make_iterator(1);
  expect_mismatch(other_seed, state);
  Iterator other_iteration = ds.make_iterator(0);
  expect_mismatch(other_iteration, state);
  std::ofstream(dir_ / "f9.txt") << "1\n";
  Iterator more_files = file_pipeline(pattern(), 2).make_iterator(1);
  expect_mismatch(more_files, state);
}

TEST_F(FilesTest, DestroyingIteratorsWithBusyWorkersDoesNotHang) {
  within_seconds(60, [&] {
    const Dataset ds = file_pipeline(pattern(), 8).repeat();
    for (int round = 0; round < 12; ++round) {
      Iterator it = ds.make_iterator(static_cast<uint64_t>(round));
      for (int i = 0; i < round; ++i) ASSERT_TRUE(it.next());
    }
    // Workers blocked in slow map calls while the iterator goes away.
    const Dataset slow = numbers(100).map(
        [](const Element& e) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          return e;
        },
        8);
    for (int round = 0; round < 3; ++round) {
      Iterator it = slow.make_iterator();
      ASSERT_TRUE(it.next());
    }
    const Dataset slow_inner = numbers(6).interleave(
        [](const Element& e) {
          return numbers(50).map([](const Element& x) {
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            return x;
          });
        },
        3, 2, 3);
    for (int round = 0; round < 3; ++round) {
      Iterator it = slow_inner.make_iterator();
      ASSERT_TRUE(it.next());
    }
  });
}

}  // namespace
}  // namespace keel
