#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

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

// Blocks of 4 MiB and more are whole 2 MiB pages, aligned to them (so the kernel can back them with
// transparent huge pages): a request is rounded up to them, and the cache keys blocks by that size.
TEST(HostAllocator, LargeBlocksAreWholeHugePages) {
  host_cache_release();
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t bytes = (size_t{5} << 20) + 1;
  void* a = host_allocate(bytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % kHuge, 0u);
  std::memset(a, 1, bytes);
  host_free(a, bytes);
  EXPECT_EQ(host_cache_stats().cached_bytes, static_cast<int64_t>(3 * kHuge));  // 5 MiB + 1 -> 6 MiB
  void* b = host_allocate(size_t{6} << 20);  // the same whole pages
  EXPECT_EQ(a, b);
  host_free(b, size_t{6} << 20);
  void* small = host_allocate(size_t{4} << 20 >> 1);  // below 4 MiB: 64-byte alignment, as before
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small) % 64, 0u);
  host_free(small, size_t{4} << 20 >> 1);
  host_cache_release();
}

// Each thread keeps its small blocks to itself, without a lock; a thread's blocks outlive it in the
// shared cache, where any thread finds them.
TEST(HostAllocator, AThreadsBlocksGoToTheSharedCacheWhenItEnds) {
  host_cache_release();
  void* from_thread = nullptr;
  std::thread([&] {
    void* a = host_allocate(3000);
    host_free(a, 3000);
    EXPECT_EQ(host_allocate(3000), a);  // its own cache
    host_free(a, 3000);
    from_thread = a;
  }).join();
  EXPECT_EQ(host_cache_stats().cached_bytes, 3008);
  void* here = host_allocate(3000);
  EXPECT_EQ(here, from_thread);
  host_free(here, 3000);
  host_cache_release();
  EXPECT_EQ(host_cache_stats().cached_bytes, 0);
}

// A thread that frees what another allocates (a replica freeing the pipeline's batches) does not
// keep those blocks: once its cache is full (32 MiB), all of it goes where the allocating thread
// finds it.
TEST(HostAllocator, AFullThreadCacheGoesToTheSharedCache) {
  host_cache_release();
  constexpr size_t kBlock = size_t{2} << 20;  // under 4 MiB: a thread's to keep
  std::vector<void*> blocks(17);
  std::thread([&] {
    for (void*& p : blocks) p = host_allocate(kBlock);
  }).join();
  for (void* p : blocks) host_free(p, kBlock);  // 16 fill this thread's cache; the 17th moves them
  const HostCacheStats before = host_cache_stats();
  EXPECT_EQ(before.cached_bytes, static_cast<int64_t>(17 * kBlock));
  std::vector<void*> again(16);
  std::thread([&] {
    for (void*& p : again) p = host_allocate(kBlock);
  }).join();
  EXPECT_EQ(host_cache_stats().hits, before.hits + 16);  // from the shared cache, none from the system
  for (void* p : again) EXPECT_NE(std::find(blocks.begin(), blocks.end(), p), blocks.end());
  for (void* p : again) host_free(p, kBlock);
  host_cache_release();
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
