#include "framework/core/fiber_locals.h"

#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace keel {
namespace {

int& counter() {
  thread_local int value = 7;
  return value;
}
std::vector<std::string>& names() {
  thread_local std::vector<std::string> value{"first"};
  return value;
}
const FiberLocal<int, counter> kCounterFollowsTheReplica;
const FiberLocal<std::vector<std::string>, names> kNamesFollowTheReplica;

TEST(FiberLocalsTest, AFiberStartsAtTheInitialValuesAndSwapsWithTheThread) {
  counter() = 1;
  names() = {"thread"};
  FiberLocals fiber;
  fiber.swap_with_thread();  // entering the fiber
  EXPECT_EQ(counter(), 7);
  EXPECT_EQ(names(), std::vector<std::string>{"first"});
  counter() = 42;
  names().push_back("fiber");
  fiber.swap_with_thread();  // leaving it
  EXPECT_EQ(counter(), 1);
  EXPECT_EQ(names(), std::vector<std::string>{"thread"});
  fiber.swap_with_thread();  // and back: what it left
  EXPECT_EQ(counter(), 42);
  EXPECT_EQ(names(), (std::vector<std::string>{"first", "fiber"}));
  fiber.swap_with_thread();
}

TEST(FiberLocalsTest, RegisteringAfterTheFirstFiberIsRefused) {
  FiberLocals fiber;
  EXPECT_THROW(detail::register_fiber_local({sizeof(int), alignof(int), nullptr, nullptr, nullptr}), std::logic_error);
}

}  // namespace
}  // namespace keel
