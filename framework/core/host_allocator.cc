#include "framework/core/host_allocator.h"

#include <sys/mman.h>

#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

// AddressSanitizer: a cached block is poisoned until it is handed out again, so that a tensor used
// after its storage was freed is reported, as it would be had the block gone back to malloc.
#if defined(__SANITIZE_ADDRESS__)
#define KEEL_HOST_CACHE_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KEEL_HOST_CACHE_UNDER_ASAN 1
#endif
#endif
#ifdef KEEL_HOST_CACHE_UNDER_ASAN
#include <sanitizer/asan_interface.h>
#define KEEL_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define KEEL_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define KEEL_POISON(p, n) ((void)(p), (void)(n))
#define KEEL_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace keel {
namespace {

// Blocks up to this size are cached; the cache holds at most kMaxCachedBytes, beyond which frees go
// straight back to the system.
constexpr size_t kMaxCachedBlock = size_t{256} << 20;
constexpr int64_t kMaxCachedBytes = int64_t{1} << 30;

struct Cache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;  // by rounded size
  HostCacheStats stats;
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: tensors may be freed during static destruction
  return *c;
}

// Blocks of at least kHugePageMin bytes are whole 2 MiB pages, aligned to them and advised as such.
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kHugePageMin = size_t{4} << 20;

size_t rounded(size_t bytes) {
  return bytes >= kHugePageMin ? (bytes + kHugePage - 1) & ~(kHugePage - 1) : (bytes + 63) & ~size_t{63};
}

}  // namespace

void advise_huge_pages(void* p, size_t bytes) {
  const auto begin = (reinterpret_cast<uintptr_t>(p) + kHugePage - 1) & ~uintptr_t{kHugePage - 1};
  const auto end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~uintptr_t{kHugePage - 1};
  // Advice only: a kernel without transparent huge pages says EINVAL, and 4 KiB pages it is.
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

void* host_allocate(size_t bytes) {
  const size_t size = rounded(bytes == 0 ? 1 : bytes);
  if (size <= kMaxCachedBlock) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.free_blocks.find(size);
    if (it != c.free_blocks.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      c.stats.cached_bytes -= static_cast<int64_t>(size);
      ++c.stats.hits;
      KEEL_UNPOISON(p, size);
      return p;
    }
    ++c.stats.misses;
  }
  void* p = std::aligned_alloc(size >= kHugePageMin ? kHugePage : 64, size);
  if (p == nullptr) throw std::bad_alloc();
  if (size >= kHugePageMin) advise_huge_pages(p, size);
  return p;
}

void host_free(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  const size_t size = rounded(bytes == 0 ? 1 : bytes);
  if (size <= kMaxCachedBlock) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.stats.cached_bytes + static_cast<int64_t>(size) <= kMaxCachedBytes) {
      c.free_blocks[size].push_back(ptr);
      c.stats.cached_bytes += static_cast<int64_t>(size);
      KEEL_POISON(ptr, size);
      return;
    }
  }
  std::free(ptr);
}

HostCacheStats host_cache_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.stats;
}

void host_cache_release() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  for (auto& [size, blocks] : c.free_blocks) {
    for (void* p : blocks) {
      KEEL_UNPOISON(p, size);
      std::free(p);
    }
  }
  c.free_blocks.clear();
  c.stats.cached_bytes = 0;
}

}  // namespace keel
