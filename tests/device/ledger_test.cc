#include "framework/device/ledger.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/core/tensor.h"
#include "framework/device/context.h"

namespace keel {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(CoreLedgerTest, ChargeAndReleaseUpdateStats) {
  CoreLedger core(0, 0);
  const uint64_t a = core.charge(100, Category::parameters, "dense/kernel", {5, 5});
  const uint64_t b = core.charge(40, Category::parameters, "dense/bias", {10});
  const uint64_t c = core.charge(1000, Category::activations, "activation:dense", {250});
  MemoryStat p = core.stat(Category::parameters);
  EXPECT_EQ(p.current, 140);
  EXPECT_EQ(p.peak, 140);
  EXPECT_EQ(p.allocated, 140);
  EXPECT_EQ(p.freed, 0);
  EXPECT_EQ(p.alloc_count, 2);
  EXPECT_EQ(p.free_count, 0);
  EXPECT_EQ(core.total().current, 1140);

  core.release(b);
  core.release(c);
  p = core.stat(Category::parameters);
  EXPECT_EQ(p.current, 100);
  EXPECT_EQ(p.peak, 140);
  EXPECT_EQ(p.allocated, 140);
  EXPECT_EQ(p.freed, 40);
  EXPECT_EQ(p.free_count, 1);
  const MemoryStat act = core.stat(Category::activations);
  EXPECT_EQ(act.current, 0);
  EXPECT_EQ(act.peak, 1000);
  EXPECT_EQ(act.freed, 1000);
  const MemoryStat total = core.total();
  EXPECT_EQ(total.current, 100);
  EXPECT_EQ(total.peak, 1140);
  EXPECT_EQ(total.allocated, 1140);
  EXPECT_EQ(total.freed, 1040);
  EXPECT_EQ(total.alloc_count, 3);
  EXPECT_EQ(total.free_count, 2);
  // Other categories untouched.
  EXPECT_EQ(core.stat(Category::optimizer).allocated, 0);
  core.release(a);
  EXPECT_EQ(core.total().current, 0);
}

TEST(CoreLedgerTest, ReleasingTwiceIsHarmless) {
  CoreLedger core(0, 0);
  const uint64_t a = core.charge(64, Category::workspace, "w", {16});
  core.release(a);
  core.release(a);
  EXPECT_EQ(core.total().current, 0);
  EXPECT_EQ(core.total().free_count, 1);
}

TEST(CoreLedgerTest, RetagMovesBytesBetweenCategoriesNotTheTotal) {
  CoreLedger core(0, 0);
  const uint64_t a = core.charge(256, Category::workspace, "backward:dense", {64});
  core.retag(a, Category::gradients, "gradient:dense/kernel");
  EXPECT_EQ(core.stat(Category::workspace).current, 0);
  EXPECT_EQ(core.stat(Category::gradients).current, 256);
  EXPECT_EQ(core.stat(Category::gradients).peak, 256);
  EXPECT_EQ(core.total().current, 256);
  EXPECT_EQ(core.total().allocated, 256);
  EXPECT_EQ(core.total().alloc_count, 1);
  const std::vector<LiveAllocation> live = core.live_allocations();
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].owner, "gradient:dense/kernel");
  EXPECT_EQ(live[0].category, Category::gradients);
  core.release(a);
  EXPECT_EQ(core.stat(Category::gradients).current, 0);
  EXPECT_EQ(core.stat(Category::workspace).current, 0);
}

TEST(CoreLedgerTest, EventLogIsOffUntilAskedAndRecordsEachChangeInOrder) {
  CoreLedger core(0, 0);
  core.charge(8, Category::parameters, "before", {2});
  core.mark("not recorded");
  EXPECT_TRUE(core.events().empty());
  core.record_events(true);
  const uint64_t a = core.charge(256, Category::workspace, "backward:dense", {64});
  core.mark("step");
  core.retag(a, Category::gradients, "gradient:dense/kernel");
  core.release(a);
  const std::vector<LedgerEvent> e = core.events();
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e[0].kind, LedgerEventKind::charge);
  EXPECT_EQ(e[0].handle, a);
  EXPECT_EQ(e[0].bytes, 256);
  EXPECT_EQ(e[0].owner, "backward:dense");
  EXPECT_EQ(e[0].shape, Shape({64}));
  EXPECT_EQ(e[0].total, 264);
  EXPECT_EQ(e[0].current[static_cast<size_t>(Category::workspace)], 256);
  EXPECT_EQ(e[0].current[static_cast<size_t>(Category::parameters)], 8);
  EXPECT_EQ(e[1].kind, LedgerEventKind::mark);
  EXPECT_EQ(e[1].owner, "step");
  EXPECT_EQ(e[1].total, 264);
  EXPECT_EQ(e[2].kind, LedgerEventKind::retag);
  EXPECT_EQ(e[2].from_category, Category::workspace);
  EXPECT_EQ(e[2].category, Category::gradients);
  EXPECT_EQ(e[2].owner, "gradient:dense/kernel");
  EXPECT_EQ(e[2].current[static_cast<size_t>(Category::workspace)], 0);
  EXPECT_EQ(e[2].current[static_cast<size_t>(Category::gradients)], 256);
  EXPECT_EQ(e[3].kind, LedgerEventKind::release);
  EXPECT_EQ(e[3].category, Category::gradients);
  EXPECT_EQ(e[3].total, 8);
  core.record_events(false);
  core.charge(4, Category::inputs, "after", {1});
  EXPECT_EQ(core.events().size(), 4u);
  EXPECT_STREQ(ledger_event_kind_name(LedgerEventKind::retag), "retag");
}

TEST(LedgerTest, MarksGoToEveryCore) {
  Ledger ledger(DeviceSpec::custom(3, 0));
  ledger.record_events(true);
  ledger.mark("train_step");
  for (int c = 0; c < 3; ++c) {
    ASSERT_EQ(ledger.core(c).events().size(), 1u);
    EXPECT_EQ(ledger.core(c).events()[0].owner, "train_step");
  }
}

TEST(CoreLedgerTest, LiveAllocationsLargestFirst) {
  CoreLedger core(3, 0);
  core.charge(10, Category::parameters, "small", {});
  core.charge(1000, Category::activations, "big", {});
  core.charge(100, Category::optimizer, "medium", {});
  const std::vector<LiveAllocation> live = core.live_allocations();
  ASSERT_EQ(live.size(), 3u);
  EXPECT_EQ(live[0].owner, "big");
  EXPECT_EQ(live[1].owner, "medium");
  EXPECT_EQ(live[2].owner, "small");
}

TEST(CoreLedgerTest, ResetPeaksStartsANewHighWaterMark) {
  CoreLedger core(0, 0);
  const uint64_t a = core.charge(500, Category::activations, "a", {});
  core.charge(100, Category::activations, "b", {});
  core.release(a);
  EXPECT_EQ(core.stat(Category::activations).peak, 600);
  core.reset_peaks();
  EXPECT_EQ(core.stat(Category::activations).peak, 100);
  EXPECT_EQ(core.total().peak, 100);
  EXPECT_EQ(core.stat(Category::activations).allocated, 600) << "reset_peaks keeps the cumulative counters";
  core.charge(50, Category::activations, "c", {});
  EXPECT_EQ(core.stat(Category::activations).peak, 150);
}

TEST(LedgerTest, ResetPeaksOnEveryCore) {
  Ledger ledger(DeviceSpec::custom(2, 0));
  for (int c = 0; c < 2; ++c) ledger.core(c).release(ledger.core(c).charge(100, Category::workspace, "w", {}));
  ledger.reset_peaks();
  for (int c = 0; c < 2; ++c) EXPECT_EQ(ledger.core(c).total().peak, 0) << c;
}

TEST(CoreLedgerTest, ExhaustionThrowsBeforeCharging) {
  CoreLedger core(5, 1000);
  core.charge(600, Category::parameters, "dense/kernel", {150});
  core.charge(300, Category::activations, "activation:dense", {75});
  const MemoryStat before_total = core.total();
  const MemoryStat before_inputs = core.stat(Category::inputs);
  try {
    core.charge(200, Category::inputs, "infeed:images", {2, 25});
    FAIL() << "expected ResourceExhausted";
  } catch (const ResourceExhausted& e) {
    EXPECT_EQ(e.core(), 5);
    EXPECT_EQ(e.requested_bytes(), 200);
    const std::string msg = e.what();
    EXPECT_THAT(msg, HasSubstr("core 5"));
    EXPECT_THAT(msg, HasSubstr("200 bytes"));
    EXPECT_THAT(msg, HasSubstr("infeed:images"));
    EXPECT_THAT(msg, HasSubstr("inputs"));
    EXPECT_THAT(msg, HasSubstr("1000"));             // the capacity
    EXPECT_THAT(msg, HasSubstr("dense/kernel"));     // largest live allocations
    EXPECT_THAT(msg, HasSubstr("activation:dense"));
    EXPECT_LT(msg.find("dense/kernel"), msg.find("activation:dense")) << "largest first";
  }
  const MemoryStat after_total = core.total();
  EXPECT_EQ(after_total.current, before_total.current);
  EXPECT_EQ(after_total.peak, before_total.peak);
  EXPECT_EQ(after_total.allocated, before_total.allocated);
  EXPECT_EQ(after_total.alloc_count, before_total.alloc_count);
  EXPECT_EQ(core.stat(Category::inputs).allocated, before_inputs.allocated);
  EXPECT_EQ(core.live_allocations().size(), 2u);
  // Exactly up to capacity still fits.
  core.charge(100, Category::inputs, "fits", {});
  EXPECT_EQ(core.total().current, 1000);
  EXPECT_THROW(core.charge(1, Category::inputs, "one byte", {}), ResourceExhausted);
}

TEST(CoreLedgerTest, NoBudgetMeansNoLimit) {
  CoreLedger core(0, 0);
  EXPECT_NO_THROW(core.charge(int64_t{1} << 50, Category::parameters, "huge", {}));
}

// A plan without a budget may sum more than int64 holds: refused, never wrapped into a small figure.
TEST(CoreLedgerTest, ChargesThatWouldOverflowAreRefused) {
  CoreLedger core(0, 0);
  core.charge(INT64_MAX - 10, Category::activations, "huge", {});
  EXPECT_THROW(core.charge(11, Category::activations, "one more", {}), std::invalid_argument);
  EXPECT_EQ(core.total().current, INT64_MAX - 10) << "nothing charged";
  CoreLedger budget(0, 1000);
  EXPECT_THROW(budget.charge(INT64_MAX, Category::inputs, "past", {}), ResourceExhausted);
}

TEST(CoreLedgerTest, TransfersAreCounted) {
  CoreLedger core(0, 0);
  core.record_host_to_core(100);
  core.record_host_to_core(28);
  core.record_core_to_host(8);
  const TransferStat t = core.transfers();
  EXPECT_EQ(t.host_to_core_bytes, 128);
  EXPECT_EQ(t.host_to_core_count, 2);
  EXPECT_EQ(t.core_to_host_bytes, 8);
  EXPECT_EQ(t.core_to_host_count, 1);
}

DeviceContext on_ledger(Ledger& ledger, int core, Category category = Category::activations) {
  DeviceContext ctx;
  ctx.ledger = &ledger;
  ctx.core = core;
  ctx.category = category;
  return ctx;
}

TEST(LedgerTensorTest, TensorOnOneCoreIsChargedThereAndReleasedWhenFreed) {
  Ledger ledger(DeviceSpec::custom(4, 0));
  {
    ContextScope scope(on_ledger(ledger, 2));
    Tensor t = Tensor::zeros({8, 16});
    Tensor view = t.reshape({128});  // a view: no new charge, keeps the storage alive
    EXPECT_EQ(ledger.core(2).stat(Category::activations).current, 8 * 16 * 4);
    EXPECT_EQ(ledger.core(2).stat(Category::activations).alloc_count, 1);
    for (int c : {0, 1, 3}) EXPECT_EQ(ledger.core(c).total().current, 0) << c;
    t = Tensor();
    EXPECT_EQ(ledger.core(2).stat(Category::activations).current, 8 * 16 * 4);
  }
  EXPECT_EQ(ledger.core(2).stat(Category::activations).current, 0);
  EXPECT_EQ(ledger.core(2).stat(Category::activations).freed, 8 * 16 * 4);
}

TEST(LedgerTensorTest, MirroredTensorIsChargedOnEveryCore) {
  Ledger ledger(DeviceSpec::custom(4, 0));
  {
    ContextScope scope(on_ledger(ledger, -1, Category::parameters));
    Tensor t = Tensor::zeros({10, 10});
    for (int c = 0; c < 4; ++c) {
      EXPECT_EQ(ledger.core(c).stat(Category::parameters).current, 400) << c;
      EXPECT_EQ(ledger.core(c).stat(Category::parameters).alloc_count, 1) << c;
    }
    ASSERT_EQ(t.storage().charges().size(), 1u);  // one record of every core
    EXPECT_TRUE(t.storage().charges()[0].all_cores);
  }
  for (int c = 0; c < 4; ++c) EXPECT_EQ(ledger.core(c).stat(Category::parameters).current, 0) << c;
}

TEST(LedgerTensorTest, ATensorMayOutliveItsLedger) {
  // A layer kept after the model that owned its strategy: its weights' charges outlive the ledger
  // (found by AddressSanitizer as a use after free in CoreLedger::release).
  Tensor t;
  {
    Ledger ledger(DeviceSpec::custom(2, 0));
    ContextScope scope(on_ledger(ledger, -1, Category::parameters));
    t = Tensor::zeros({10});
    ASSERT_EQ(t.storage().charges().size(), 1u);
    t.storage().retag(Category::optimizer, "moved");
    EXPECT_EQ(ledger.core(1).stat(Category::optimizer).current, 40);
  }
  for (const Storage::Charge& c : t.storage().charges()) EXPECT_TRUE(c.ledger.expired());
  t.storage().retag(Category::parameters, "after");  // nothing to update
  t = Tensor();                                       // nothing to release
}

TEST(LedgerTest, CoresShareOneLockAndOneLifetime) {
  std::weak_ptr<CoreLedger> first;
  std::shared_ptr<CoreLedger> last;
  {
    Ledger ledger(DeviceSpec::custom(4, 0));
    {
      const CoreLedger::Held held = ledger.core(0).hold();
      ledger.core(2).charge(64, Category::workspace, "w", {16}, held);  // core 0's lock is core 2's
    }
    EXPECT_EQ(ledger.core(2).total().current, 64);
    CoreLedger alone(0, 0);
    const CoreLedger::Held other = alone.hold();
    EXPECT_THROW(ledger.core(1).charge(4, Category::workspace, "w", {1}, other), std::logic_error) << "another lock";
    first = ledger.core_ptr(0);
    last = ledger.core_ptr(3);
  }
  EXPECT_FALSE(first.expired()) << "one core's pointer keeps every core of its ledger";
  last.reset();
  EXPECT_TRUE(first.expired());
}

// One record for every core (CoreLedger::charge_all): each core's stats, live allocations and event
// log are those of a charge of its own, next to one that is.
TEST(LedgerTest, AnAllCoreRecordIsEachCoresOwnCharge) {
  Ledger ledger(DeviceSpec::custom(3, 0));
  ledger.record_events(true);
  uint64_t all = 0, own = 0;
  {
    const CoreLedger::Held held = ledger.core(0).hold();
    own = ledger.core(1).charge(8, Category::workspace, "own", {2}, held);
    all = ledger.core(0).charge_all(40, Category::parameters, "dense/kernel", {2, 5}, {}, held);
  }
  EXPECT_NE(all, own);
  for (int c = 0; c < 3; ++c) {
    const MemoryStat p = ledger.core(c).stat(Category::parameters);
    EXPECT_EQ(p.current, 40) << c;
    EXPECT_EQ(p.peak, 40) << c;
    EXPECT_EQ(p.alloc_count, 1) << c;
    EXPECT_EQ(ledger.core(c).total().current, c == 1 ? 48 : 40) << c;
    const std::vector<LiveAllocation> live = ledger.core(c).live_allocations();
    ASSERT_EQ(live.size(), c == 1 ? 2u : 1u) << c;
    EXPECT_EQ(live[0].owner, "dense/kernel");
    EXPECT_EQ(live[0].shape, (Shape{2, 5}));
    EXPECT_EQ(live[0].bytes, 40);
  }
  ledger.core(2).release(all);  // a core's own release does not take a record's handle
  EXPECT_EQ(ledger.core(2).total().current, 40);
  ledger.core(0).release(own);  // nor a record's release a core's own handle
  EXPECT_EQ(ledger.core(1).total().current, 48);
  {
    const CoreLedger::Held held = ledger.core(0).hold();
    ledger.core(2).retag_all(all, Category::gradients, "dense/kernel:grad", held);  // any core of the ledger
    ledger.core(0).release_all(all, held);
    ledger.core(0).release_all(all, held);  // twice: harmless
  }
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(ledger.core(c).total().current, c == 1 ? 8 : 0) << c;
    EXPECT_EQ(ledger.core(c).stat(Category::gradients).freed, 40) << c;
    EXPECT_EQ(ledger.core(c).stat(Category::parameters).freed, 40) << c;
    const std::vector<LedgerEvent> e = ledger.core(c).events();
    ASSERT_EQ(e.size(), c == 1 ? 4u : 3u) << c;
    const size_t first = c == 1 ? 1 : 0;
    EXPECT_EQ(e[first].kind, LedgerEventKind::charge);
    EXPECT_EQ(e[first].handle, all);
    EXPECT_EQ(e[first].shape, (Shape{2, 5}));
    EXPECT_EQ(e[first].current[static_cast<size_t>(Category::parameters)], 40);
    EXPECT_EQ(e[first + 1].kind, LedgerEventKind::retag);
    EXPECT_EQ(e[first + 1].from_category, Category::parameters);
    EXPECT_EQ(e[first + 1].owner, "dense/kernel:grad");
    EXPECT_EQ(e[first + 2].kind, LedgerEventKind::release);
    EXPECT_EQ(e[first + 2].category, Category::gradients);
    EXPECT_EQ(e[first + 2].total, c == 1 ? 8 : 0);
  }
}

// Each core's share of a buffer laid out along an axis, or flat: its own bytes and shape.
TEST(LedgerTest, AnAllCoreRecordChargesEachCoreItsShare) {
  Ledger ledger(DeviceSpec::custom(3, 0));
  const std::vector<int64_t> rows{3, 3, 2}, elements{14, 13, 13};
  uint64_t block = 0, flat = 0;
  {
    const CoreLedger::Held held = ledger.core(0).hold();
    block = ledger.core(0).charge_all(160, Category::activations, "x", {8, 5},
                                      {CoreShare::Kind::axis_block, 0, rows, 20}, held);
    flat = ledger.core(0).charge_all(80, Category::optimizer, "m", {4, 10}, {CoreShare::Kind::flat, -1, elements, 2}, held);
  }
  for (int c = 0; c < 3; ++c) {
    const size_t i = static_cast<size_t>(c);
    EXPECT_EQ(ledger.core(c).stat(Category::activations).current, rows[i] * 20) << c;
    EXPECT_EQ(ledger.core(c).stat(Category::optimizer).current, elements[i] * 2) << c;
    for (const LiveAllocation& a : ledger.core(c).live_allocations()) {
      const Shape want = a.owner == "x" ? Shape{rows[i], 5} : Shape{elements[i]};
      EXPECT_EQ(a.shape, want) << c << " " << a.owner;
    }
  }
  {
    const CoreLedger::Held held = ledger.core(0).hold();
    ledger.core(0).release_all(block, held);
    ledger.core(0).release_all(flat, held);
  }
  for (int c = 0; c < 3; ++c) EXPECT_EQ(ledger.core(c).total().current, 0) << c;
}

// All or nothing: a record that one core cannot hold charges none, and says which core and share.
TEST(LedgerTest, AnAllCoreRecordThatOneCoreCannotHoldChargesNone) {
  Ledger ledger(DeviceSpec::custom(3, 1000));
  const uint64_t hog = ledger.core(2).charge(900, Category::workspace, "hog", {225});
  const std::vector<int64_t> rows{4, 4, 4};
  try {
    ledger.core(0).charge_all(480, Category::activations, "x", {12, 10}, {CoreShare::Kind::axis_block, 0, rows, 40},
                              ledger.core(0).hold());
    ADD_FAILURE() << "core 2 has 100 bytes free";
  } catch (const ResourceExhausted& e) {
    EXPECT_EQ(e.core(), 2);
    EXPECT_EQ(e.requested_bytes(), 160);
    EXPECT_THAT(e.what(), HasSubstr("'x' (4, 10)"));
  }
  for (int c = 0; c < 3; ++c) EXPECT_EQ(ledger.core(c).stat(Category::activations).alloc_count, 0) << c;
  ledger.core(2).release(hog);
  CoreLedger alone(0, 0);
  EXPECT_THROW(alone.charge_all(4, Category::workspace, "w", {1}, {}, alone.hold()), std::logic_error) << "no ledger";
}

TEST(LedgerTensorTest, AMirroredTensorsChargesAreReleasedAndRetaggedTogether) {
  Ledger ledger(DeviceSpec::custom(3, 0));
  ledger.record_events(true);
  {
    ContextScope scope(on_ledger(ledger, -1, Category::activations));
    Tensor t = Tensor::zeros({4});
    t.storage().retag(Category::gradients, "g");
    for (int c = 0; c < 3; ++c) EXPECT_EQ(ledger.core(c).stat(Category::gradients).current, 16) << c;
  }
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(ledger.core(c).total().current, 0) << c;
    const std::vector<LedgerEvent> events = ledger.core(c).events();
    ASSERT_EQ(events.size(), 3u) << c;
    EXPECT_EQ(events[1].kind, LedgerEventKind::retag);
    EXPECT_EQ(events[2].kind, LedgerEventKind::release);
    EXPECT_EQ(events[2].category, Category::gradients);
  }
}

TEST(LedgerTensorTest, ExplicitCategoryAndOwnerOverrideTheContextDefault) {
  Ledger ledger(DeviceSpec::custom(1, 0));
  ContextScope scope(on_ledger(ledger, 0));
  Tensor t = Tensor::empty({4}, Category::optimizer, "Adam/w/m");
  EXPECT_EQ(ledger.core(0).stat(Category::optimizer).current, 16);
  EXPECT_EQ(ledger.core(0).stat(Category::activations).current, 0);
  EXPECT_EQ(ledger.core(0).live_allocations().at(0).owner, "Adam/w/m");
  EXPECT_EQ(ledger.core(0).live_allocations().at(0).shape, (Shape{4}));
}

TEST(LedgerTensorTest, CategoryAndOwnerScopesSetTheDefaults) {
  Ledger ledger(DeviceSpec::custom(1, 0));
  ContextScope scope(on_ledger(ledger, 0));
  Tensor a;
  {
    CategoryScope cat(Category::workspace, "backward:dense");
    a = Tensor::zeros({3});
  }
  Tensor b = Tensor::zeros({5});
  EXPECT_EQ(ledger.core(0).stat(Category::workspace).current, 12);
  EXPECT_EQ(ledger.core(0).stat(Category::activations).current, 20);
  bool saw = false;
  for (const LiveAllocation& l : ledger.core(0).live_allocations()) saw = saw || l.owner == "backward:dense";
  EXPECT_TRUE(saw);
}

TEST(LedgerTensorTest, TensorThatDoesNotFitThrowsAndChargesNothing) {
  Ledger ledger(DeviceSpec::custom(2, kMiB));
  ContextScope scope(on_ledger(ledger, -1, Category::parameters));
  Tensor ok = Tensor::zeros({1024});  // 4 KiB on each core
  // Fill core 1 so a mirrored allocation fits on core 0 but not on core 1.
  const uint64_t hog = ledger.core(1).charge(kMiB - 4096 - 100, Category::workspace, "hog", {});
  const MemoryStat c0 = ledger.core(0).total();
  EXPECT_THROW(Tensor::zeros({1024}), ResourceExhausted);
  // Core 0, which would have had room, is not charged either.
  EXPECT_EQ(ledger.core(0).total().current, c0.current);
  EXPECT_EQ(ledger.core(0).total().alloc_count, c0.alloc_count);
  EXPECT_EQ(ledger.core(0).total().peak, c0.peak);
  EXPECT_EQ(ledger.core(1).total().current, kMiB - 100);
  ledger.core(1).release(hog);
}

TEST(LedgerTensorTest, HostScopeTensorsAreNotCharged) {
  Ledger ledger(DeviceSpec::custom(1, 0));
  ContextScope scope(on_ledger(ledger, 0));
  {
    HostScope host;
    Tensor t = Tensor::zeros({100});
    EXPECT_TRUE(t.storage().charges().empty());
  }
  Tensor v = Tensor::from_vector({2}, std::vector<float>{1, 2});
  EXPECT_EQ(ledger.core(0).total().allocated, 0);
}

}  // namespace
}  // namespace keel
