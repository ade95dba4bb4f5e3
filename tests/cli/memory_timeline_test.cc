// Reading a planned step's event log (tools/cli/memory_timeline.h) on a hand-made ledger log.
#include "tools/cli/memory_timeline.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace keel::cli {
namespace {

// A ledger recording: a, then b, retag b, release a, then c; the peak is after b (a + b).
std::vector<LedgerEvent> small_log() {
  CoreLedger core(0, 0);
  core.record_events(true);
  const uint64_t a = core.charge(100, Category::parameters, "a", {25});
  core.mark("step");
  const uint64_t b = core.charge(300, Category::workspace, "b", {75});
  core.retag(b, Category::gradients, "gradient:b");
  core.release(a);
  core.charge(50, Category::activations, "c", {});
  return core.events();
}

TEST(MemoryTimeline, PeaksAreThoseOfTheLedger) {
  const TimelinePeaks p = timeline_peaks(small_log());
  EXPECT_EQ(p.peak, 400);
  EXPECT_EQ(p.peak_index, 2u);
  EXPECT_EQ(p.category_peak[static_cast<size_t>(Category::parameters)], 100);
  EXPECT_EQ(p.category_peak[static_cast<size_t>(Category::workspace)], 300);
  EXPECT_EQ(p.category_peak[static_cast<size_t>(Category::gradients)], 300);
  EXPECT_EQ(p.category_peak[static_cast<size_t>(Category::activations)], 50);
}

TEST(MemoryTimeline, LiveAfterFollowsChargesRetagsAndReleases) {
  const std::vector<LedgerEvent> log = small_log();
  std::vector<LiveAllocation> live = live_after(log, 2);
  ASSERT_EQ(live.size(), 2u);
  EXPECT_EQ(live[0].owner, "b");
  EXPECT_EQ(live[0].category, Category::workspace);
  EXPECT_EQ(live[1].owner, "a");
  live = live_after(log, 3);
  EXPECT_EQ(live[0].owner, "gradient:b");
  EXPECT_EQ(live[0].category, Category::gradients);
  live = live_after(log, log.size() - 1);
  ASSERT_EQ(live.size(), 2u);
  EXPECT_EQ(live[0].owner, "gradient:b");
  EXPECT_EQ(live[1].owner, "c");
  EXPECT_EQ(live[1].shape, Shape{});
}

TEST(MemoryTimeline, SampleKeepsEverythingWhenSmallAndEveryBucketsExtremesOtherwise) {
  const std::vector<LedgerEvent> log = small_log();
  EXPECT_EQ(sample_events(log, 100).size(), log.size());
  // A long saw-tooth with one spike: the sample is short, ordered, and holds the spike.
  CoreLedger core(0, 0);
  core.record_events(true);
  for (int i = 0; i < 5000; ++i) {
    core.release(core.charge(i == 3217 ? 1 << 20 : 10 + i % 7, Category::activations, "t", {}));
  }
  const std::vector<LedgerEvent> long_log = core.events();
  const std::vector<size_t> sample = sample_events(long_log, 200);
  EXPECT_LE(sample.size(), 202u);
  EXPECT_TRUE(std::is_sorted(sample.begin(), sample.end()));
  EXPECT_NE(std::find(sample.begin(), sample.end(), size_t{2 * 3217}), sample.end());
  EXPECT_EQ(timeline_peaks(long_log).peak_index, size_t{2 * 3217});
}

}  // namespace
}  // namespace keel::cli
