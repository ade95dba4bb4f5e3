// DeviceContext: each thread's own context, and the RAII scopes that change and restore it.
#include "framework/device/context.h"

#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "framework/core/tensor.h"
#include "framework/device/ledger.h"

namespace keel {
namespace {

void expect_host_default(const DeviceContext& ctx, const std::string& where) {
  EXPECT_EQ(ctx.ledger, nullptr) << where;
  EXPECT_EQ(ctx.strategy, nullptr) << where;
  EXPECT_EQ(ctx.core, -1) << where;
  EXPECT_FALSE(ctx.abstract) << where;
  EXPECT_EQ(ctx.category, Category::activations) << where;
  EXPECT_EQ(ctx.owner, "") << where;
}

DeviceContext on_core(Ledger& ledger, int core, Category category, std::string owner, bool abstract = false) {
  DeviceContext ctx;
  ctx.ledger = &ledger;
  ctx.core = core;
  ctx.category = category;
  ctx.owner = std::move(owner);
  ctx.abstract = abstract;
  return ctx;
}

TEST(DeviceContextTest, ANewThreadStartsOnTheHostUncharged) {
  std::thread t([] { expect_host_default(device_context(), "fresh thread"); });
  t.join();
}

TEST(DeviceContextTest, OneContextPerThread) {
  Ledger ledger(DeviceSpec::custom(2, 0));
  DeviceContext* mine = &device_context();
  EXPECT_EQ(&device_context(), mine) << "the same thread sees the same context";
  ContextScope scope(on_core(ledger, 1, Category::workspace, "here"));
  DeviceContext* theirs = nullptr;
  std::thread t([&] {
    theirs = &device_context();
    // This thread's context is untouched by the other thread's scope.
    expect_host_default(device_context(), "other thread");
    ContextScope inner(on_core(ledger, 0, Category::inputs, "there"));
  });
  t.join();
  EXPECT_NE(theirs, mine);
  EXPECT_EQ(device_context().ledger, &ledger);
  EXPECT_EQ(device_context().core, 1) << "another thread's scope did not leak into this one";
  EXPECT_EQ(device_context().category, Category::workspace);
  EXPECT_EQ(device_context().owner, "here");
}

TEST(DeviceContextTest, ContextScopeReplacesEverythingAndRestoresItNested) {
  Ledger ledger(DeviceSpec::custom(4, 0));
  const DeviceContext before = device_context();
  {
    ContextScope outer(on_core(ledger, 2, Category::parameters, "outer", /*abstract=*/true));
    EXPECT_EQ(device_context().ledger, &ledger);
    EXPECT_EQ(device_context().core, 2);
    EXPECT_TRUE(device_context().abstract);
    EXPECT_EQ(device_context().category, Category::parameters);
    EXPECT_EQ(device_context().owner, "outer");
    {
      ContextScope inner(on_core(ledger, -1, Category::optimizer, "inner"));
      EXPECT_EQ(device_context().core, -1);
      EXPECT_FALSE(device_context().abstract);
      EXPECT_EQ(device_context().category, Category::optimizer);
      EXPECT_EQ(device_context().owner, "inner");
      // Changes made to the live context inside a scope are undone with it.
      device_context().owner = "scribbled";
      device_context().core = 3;
    }
    EXPECT_EQ(device_context().core, 2);
    EXPECT_TRUE(device_context().abstract);
    EXPECT_EQ(device_context().category, Category::parameters);
    EXPECT_EQ(device_context().owner, "outer");
  }
  EXPECT_EQ(device_context().ledger, before.ledger);
  EXPECT_EQ(device_context().core, before.core);
  EXPECT_EQ(device_context().abstract, before.abstract);
  EXPECT_EQ(device_context().category, before.category);
  EXPECT_EQ(device_context().owner, before.owner);
}

TEST(DeviceContextTest, CategoryScopeChangesTheCategoryAndOptionallyTheOwner) {
  Ledger ledger(DeviceSpec::custom(1, 0));
  ContextScope scope(on_core(ledger, 0, Category::activations, "activation:dense"));
  {
    CategoryScope cat(Category::workspace);
    EXPECT_EQ(device_context().category, Category::workspace);
    EXPECT_EQ(device_context().owner, "activation:dense") << "the one-argument form keeps the owner";
    EXPECT_EQ(device_context().ledger, &ledger);
    EXPECT_EQ(device_context().core, 0);
    {
      CategoryScope both(Category::gradients, "gradient:dense/kernel");
      EXPECT_EQ(device_context().category, Category::gradients);
      EXPECT_EQ(device_context().owner, "gradient:dense/kernel");
    }
    EXPECT_EQ(device_context().category, Category::workspace);
    EXPECT_EQ(device_context().owner, "activation:dense");
  }
  EXPECT_EQ(device_context().category, Category::activations);
  EXPECT_EQ(device_context().owner, "activation:dense");
}

TEST(DeviceContextTest, CategoryScopeRestoresAnOwnerChangedInsideIt) {
  ContextScope scope(DeviceContext{});
  device_context().owner = "before";
  {
    CategoryScope cat(Category::inputs);
    device_context().owner = "changed inside";
  }
  EXPECT_EQ(device_context().owner, "before");
  EXPECT_EQ(device_context().category, Category::activations);
}

TEST(DeviceContextTest, OwnerScopeChangesOnlyTheOwner) {
  Ledger ledger(DeviceSpec::custom(2, 0));
  ContextScope scope(on_core(ledger, 1, Category::optimizer, "Adam/w/m"));
  {
    OwnerScope owner("activation:conv1");
    EXPECT_EQ(device_context().owner, "activation:conv1");
    EXPECT_EQ(device_context().category, Category::optimizer);
    EXPECT_EQ(device_context().core, 1);
    EXPECT_EQ(device_context().ledger, &ledger);
    {
      OwnerScope nested("activation:conv2");
      EXPECT_EQ(device_context().owner, "activation:conv2");
    }
    EXPECT_EQ(device_context().owner, "activation:conv1");
  }
  EXPECT_EQ(device_context().owner, "Adam/w/m");
}

TEST(DeviceContextTest, HostScopeIsTheUnchargedDefaultAndRestoresTheDevice) {
  Ledger ledger(DeviceSpec::custom(2, 0));
  ContextScope scope(on_core(ledger, -1, Category::parameters, "dense/kernel", /*abstract=*/true));
  {
    HostScope host;
    expect_host_default(device_context(), "inside HostScope");
    const Tensor t = Tensor::zeros({10});
    EXPECT_FALSE(t.is_abstract()) << "host tensors have storage even under an abstract device context";
    EXPECT_TRUE(t.storage().charges().empty());
  }
  EXPECT_EQ(ledger.core(0).total().allocated, 0);
  EXPECT_EQ(ledger.core(1).total().allocated, 0);
  EXPECT_EQ(device_context().ledger, &ledger);
  EXPECT_EQ(device_context().core, -1);
  EXPECT_TRUE(device_context().abstract);
  EXPECT_EQ(device_context().owner, "dense/kernel");
}

TEST(DeviceContextTest, NewTensorsFollowTheContextDefaults) {
  Ledger ledger(DeviceSpec::custom(3, 0));
  ContextScope scope(on_core(ledger, 2, Category::inputs, "infeed:images"));
  const Tensor t = Tensor::zeros({4, 5});
  ASSERT_EQ(t.storage().charges().size(), 1u);
  EXPECT_EQ(t.storage().charges()[0].ledger.lock().get(), &ledger.core(2));
  EXPECT_EQ(ledger.core(2).stat(Category::inputs).current, 4 * 5 * 4);
  ASSERT_EQ(ledger.core(2).live_allocations().size(), 1u);
  EXPECT_EQ(ledger.core(2).live_allocations()[0].owner, "infeed:images");
  EXPECT_EQ(ledger.core(2).live_allocations()[0].shape, (Shape{4, 5}));
  EXPECT_EQ(ledger.core(0).total().allocated, 0);
  EXPECT_EQ(ledger.core(1).total().allocated, 0);
}

TEST(DeviceContextTest, AnAbstractContextChargesButAllocatesNothing) {
  Ledger ledger(DeviceSpec::custom(2, 0));
  ContextScope scope(on_core(ledger, -1, Category::parameters, "w", /*abstract=*/true));
  const Tensor t = Tensor::empty({8, 8});
  EXPECT_TRUE(t.is_abstract());
  EXPECT_EQ(t.data(), nullptr);
  for (int c = 0; c < 2; ++c) EXPECT_EQ(ledger.core(c).stat(Category::parameters).current, 8 * 8 * 4) << c;
}

}  // namespace
}  // namespace keel
