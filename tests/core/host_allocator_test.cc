#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "framework/core/host_allocator.h"
#include "framework/core/tensor.h"
#include "framework/device/context.h"

namespace keel {
namespace {

TEST(HostAllocator, AlignedAndReusedForTheSameSize) {
  host_cache_release();
  const HostCacheStats before = host_cache_stats();
  void* a = host_allocate(1000);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
  std::memset(a, 1, 1000);
  host_free(a, 1000);
  EXPECT_EQ(host_cache_stats().cached_bytes, before.cached_bytes + 1024);
  void* b = host_allocate(1000);  // same rounded size: the cached block comes back
  EXPECT_EQ(a, b);
  EXPECT_EQ(host_cache_stats().hits, before.hits + 1);
  host_free(b, 1000);
  host_cache_release();
  EXPECT_EQ(host_cache_stats().cached_bytes, 0);
}

TEST(HostAllocator, TensorsDoNotShareLiveBlocks) {
  HostScope host;
  Tensor a = Tensor::full({100, 100}, 1.0f);
  Tensor b = Tensor::full({100, 100}, 2.0f);
  EXPECT_NE(a.data(), b.data());
  const float* old = a.data();
  a = Tensor();  // freed into the cache
  Tensor c = Tensor::full({100, 100}, 3.0f);
  EXPECT_EQ(c.data(), old);
  EXPECT_EQ(b.data()[0], 2.0f);
  EXPECT_EQ(c.data()[9999], 3.0f);
}

}  // namespace
}  // namespace keel
