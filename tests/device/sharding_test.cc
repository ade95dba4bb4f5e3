// ShardingMode's names, and how a sharded context charges the cores: each its shard_range of the
// elements, never a whole copy, while the host holds the whole buffer.
#include "framework/device/sharding.h"

#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "framework/core/tensor.h"
#include "framework/device/collectives.h"
#include "framework/device/strategy.h"

namespace keel {
namespace {

TEST(ShardingModeTest, NamesRoundTrip) {
  for (ShardingMode m : {ShardingMode::none, ShardingMode::optimizer, ShardingMode::gradients, ShardingMode::full}) {
    EXPECT_EQ(parse_sharding_mode(sharding_mode_name(m)), m);
  }
  EXPECT_STREQ(sharding_mode_name(ShardingMode::full), "full");
}

TEST(ShardingModeTest, UnknownModesAreRefusedByName) {
  try {
    parse_sharding_mode("zero3");
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("(known: none, optimizer, gradients, full)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_sharding_mode(""), std::invalid_argument);
  EXPECT_THROW(parse_sharding_mode("Optimizer"), std::invalid_argument);
}

TEST(ShardedContextTest, EachCoreIsChargedItsShardOnly) {
  ReplicatedStrategy s(DeviceSpec::custom(3, 0), ReplicatedStrategy::Options{.shard = ShardingMode::optimizer});
  Tensor t;
  {
    ContextScope sharded(s.sharded_context(Category::optimizer));
    t = Tensor::zeros({10, 1}, Category::optimizer, "Adam/w/m");  // 10 elements over 3 cores: 4, 3, 3
  }
  EXPECT_EQ(t.size(), 10) << "the host holds the whole buffer";
  const int64_t want[] = {16, 12, 12};
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(s.ledger().core(c).stat(Category::optimizer).current, want[c]) << c;
    const auto live = s.ledger().core(c).live_allocations();
    ASSERT_EQ(live.size(), 1u);
    EXPECT_EQ(live[0].owner, "Adam/w/m");
    EXPECT_EQ(live[0].shape, (Shape{shard_range(10, 3, c).size()}));
  }
  t = Tensor();
  for (int c = 0; c < 3; ++c) EXPECT_EQ(s.ledger().core(c).stat(Category::optimizer).current, 0) << c;
}

TEST(ShardedContextTest, MirroredContextStillChargesAWholeCopyEverywhere) {
  ReplicatedStrategy s(DeviceSpec::custom(3, 0), ReplicatedStrategy::Options{.shard = ShardingMode::gradients});
  auto scope = s.scope();
  const Tensor w = Tensor::zeros({10});
  for (int c = 0; c < 3; ++c) EXPECT_EQ(s.ledger().core(c).stat(Category::parameters).current, 40) << c;
}

}  // namespace
}  // namespace keel
