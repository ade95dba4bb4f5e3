#include "framework/core/host_allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
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

// Blocks up to this size are cached; the shared cache holds at most kMaxCachedBytes, beyond which
// frees go straight back to the system.
constexpr size_t kMaxCachedBlock = size_t{256} << 20;
constexpr int64_t kMaxCachedBytes = int64_t{1} << 30;
// Blocks of at least kHugePageMin bytes are whole 2 MiB pages, aligned to them and advised as such.
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kHugePageMin = size_t{4} << 20;
// Each thread keeps its blocks under kHugePageMin, kMaxThreadBytes of them, for itself: a replica's
// small tensors come and go with no lock (the replica threads met on one mutex at every op).
// Larger blocks go to the shared cache, whose lock is small beside their work; so does a thread's
// whole cache when it is full, since what fills it is mostly blocks other threads allocate (a
// pipeline's batches, which a replica frees): kept, they made the main thread's copies of a batch's
// shards miss its cache (3x slower).
constexpr int64_t kMaxThreadBytes = int64_t{32} << 20;

size_t rounded(size_t bytes) {
  return bytes >= kHugePageMin ? (bytes + kHugePage - 1) & ~(kHugePage - 1) : (bytes + 63) & ~size_t{63};
}

using FreeBlocks = std::unordered_map<size_t, std::vector<void*>>;  // by rounded size

void* pop(FreeBlocks& blocks, size_t size) {
  auto it = blocks.find(size);
  if (it == blocks.end() || it->second.empty()) return nullptr;
  void* p = it->second.back();
  it->second.pop_back();
  return p;
}

struct ThreadCache;

struct SharedCache {
  std::mutex mu;
  FreeBlocks free_blocks;
  int64_t cached_bytes = 0;
  HostCacheStats retired;                   // the counts of threads that have exited
  std::vector<const ThreadCache*> threads;  // the live threads' caches, for host_cache_stats
};

SharedCache& shared() {
  static SharedCache* c = new SharedCache();  // never destroyed: tensors may be freed during static destruction
  return *c;
}

// Keeps a freed block in the shared cache, or gives it back to the system beyond its bound; s.mu held.
void keep_or_free(SharedCache& s, void* p, size_t size) {
  if (s.cached_bytes + static_cast<int64_t>(size) <= kMaxCachedBytes) {
    s.free_blocks[size].push_back(p);
    s.cached_bytes += static_cast<int64_t>(size);
  } else {
    KEEL_UNPOISON(p, size);
    std::free(p);
  }
}

// Written by its thread only; read by host_cache_stats (hence relaxed atomics).
struct ThreadCache {
  FreeBlocks free_blocks;
  std::atomic<int64_t> cached_bytes{0}, hits{0}, misses{0};

  ThreadCache() {
    SharedCache& s = shared();
    std::lock_guard<std::mutex> lock(s.mu);
    s.threads.push_back(this);
  }
  // The thread's blocks go to the shared cache (or back to the system beyond its bound).
  ~ThreadCache() {
    SharedCache& s = shared();
    std::lock_guard<std::mutex> lock(s.mu);
    move_to(s);
    s.retired.hits += hits.load(std::memory_order_relaxed);
    s.retired.misses += misses.load(std::memory_order_relaxed);
    s.threads.erase(std::find(s.threads.begin(), s.threads.end(), this));
  }
  ThreadCache(const ThreadCache&) = delete;
  ThreadCache& operator=(const ThreadCache&) = delete;
  // Every block to the shared cache; s.mu held.
  void move_to(SharedCache& s) {
    for (auto& [size, blocks] : free_blocks) {
      for (void* p : blocks) keep_or_free(s, p, size);
      blocks.clear();
    }
    cached_bytes.store(0, std::memory_order_relaxed);
  }
  static void add(std::atomic<int64_t>& counter, int64_t n) {
    counter.store(counter.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
};

// This thread's cache; nullptr once it has been destroyed (a tensor freed by the main thread during
// static destruction, after its thread-locals).
thread_local bool tls_cache_gone = false;
struct CacheHolder {
  ThreadCache cache;
  ~CacheHolder() { tls_cache_gone = true; }
};
ThreadCache* this_thread() {
  if (tls_cache_gone) return nullptr;
  thread_local CacheHolder holder;
  return &holder.cache;
}

// A block from this thread's cache or the shared one; nullptr if neither has one of `size`.
void* cached_block(ThreadCache* mine, size_t size) {
  void* p = mine != nullptr && size < kHugePageMin ? pop(mine->free_blocks, size) : nullptr;
  if (p != nullptr) {
    ThreadCache::add(mine->cached_bytes, -static_cast<int64_t>(size));
  } else {
    SharedCache& s = shared();
    std::lock_guard<std::mutex> lock(s.mu);
    p = pop(s.free_blocks, size);
    if (p != nullptr) s.cached_bytes -= static_cast<int64_t>(size);
  }
  if (mine != nullptr) ThreadCache::add(p != nullptr ? mine->hits : mine->misses, 1);
  return p;
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
    if (void* p = cached_block(this_thread(), size)) {
      KEEL_UNPOISON(p, size);
      return p;
    }
  }
  void* p = std::aligned_alloc(size >= kHugePageMin ? kHugePage : 64, size);
  if (p == nullptr) throw std::bad_alloc();
  if (size >= kHugePageMin) advise_huge_pages(p, size);
  return p;
}

void host_free(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  const size_t size = rounded(bytes == 0 ? 1 : bytes);
  if (size > kMaxCachedBlock) return std::free(ptr);
  KEEL_POISON(ptr, size);
  ThreadCache* mine = this_thread();
  if (mine != nullptr && size < kHugePageMin) {
    if (mine->cached_bytes.load(std::memory_order_relaxed) + static_cast<int64_t>(size) > kMaxThreadBytes) {
      // Full: most of it is likely blocks another thread allocates and this one frees (a pipeline's
      // batches, a replica's shard): they go where that thread will find them, and this thread's
      // cache starts again from what it frees now.
      SharedCache& s = shared();
      std::lock_guard<std::mutex> lock(s.mu);
      mine->move_to(s);
    }
    mine->free_blocks[size].push_back(ptr);
    ThreadCache::add(mine->cached_bytes, static_cast<int64_t>(size));
    return;
  }
  SharedCache& s = shared();
  std::lock_guard<std::mutex> lock(s.mu);
  keep_or_free(s, ptr, size);
}

HostCacheStats host_cache_stats() {
  SharedCache& s = shared();
  std::lock_guard<std::mutex> lock(s.mu);
  HostCacheStats stats = s.retired;
  stats.cached_bytes = s.cached_bytes;
  for (const ThreadCache* t : s.threads) {
    stats.cached_bytes += t->cached_bytes.load(std::memory_order_relaxed);
    stats.hits += t->hits.load(std::memory_order_relaxed);
    stats.misses += t->misses.load(std::memory_order_relaxed);
  }
  return stats;
}

void host_cache_release() {
  if (ThreadCache* mine = this_thread()) {
    for (auto& [size, blocks] : mine->free_blocks) {
      for (void* p : blocks) {
        KEEL_UNPOISON(p, size);
        std::free(p);
      }
    }
    mine->free_blocks.clear();
    mine->cached_bytes.store(0, std::memory_order_relaxed);
  }
  SharedCache& s = shared();
  std::lock_guard<std::mutex> lock(s.mu);
  for (auto& [size, blocks] : s.free_blocks) {
    for (void* p : blocks) {
      KEEL_UNPOISON(p, size);
      std::free(p);
    }
  }
  s.free_blocks.clear();
  s.cached_bytes = 0;
}

}  // namespace keel
