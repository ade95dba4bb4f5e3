#include "framework/core/host_allocator.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace keel {
namespace {

// Blocks up to this size are cached; the shared cache holds at most kMaxCachedBytes, beyond which
// frees go straight back to the system.
constexpr size_t kMaxCachedBlock = size_t{256} << 20;
constexpr int64_t kMaxCachedBytes = int64_t{1} << 30;
// Each thread keeps blocks up to kMaxThreadBlock, kMaxThreadBytes of them, for itself: a replica's
// small tensors come and go with no lock (2 replica threads meeting on one mutex at every op cost
// 6% of a small model's step, bench/mlp_throughput --device v3-8). Larger blocks go to the shared
// cache, whose lock is small beside their work; so does a thread's whole cache when it is full,
// since what fills it is mostly blocks other threads allocate (a pipeline's batches, which a replica
// frees): kept, they made the main thread's copies of a batch's shards miss its cache (3x slower).
constexpr size_t kMaxThreadBlock = size_t{4} << 20;
constexpr int64_t kMaxThreadBytes = int64_t{32} << 20;

size_t rounded(size_t bytes) { return (bytes + 63) & ~size_t{63}; }

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
  HostCacheStats retired;                // the counts of threads that have exited
  std::vector<const ThreadCache*> threads;  // the live threads' caches, for host_cache_stats
};

SharedCache& shared() {
  static SharedCache* c = new SharedCache();  // never destroyed: tensors may be freed during static destruction
  return *c;
}

// Written by its thread only; read by host_cache_stats (hence relaxed atomics, on the thread's own
// cache line: no traffic between threads).
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
  // Every block to the shared cache (or back to the system beyond its bound); s.mu held.
  void move_to(SharedCache& s) {
    for (auto& [size, blocks] : free_blocks) {
      for (void* p : blocks) {
        if (s.cached_bytes + static_cast<int64_t>(size) <= kMaxCachedBytes) {
          s.free_blocks[size].push_back(p);
          s.cached_bytes += static_cast<int64_t>(size);
        } else {
          std::free(p);
        }
      }
      blocks.clear();
    }
    cached_bytes.store(0, std::memory_order_relaxed);
  }
  void add(std::atomic<int64_t>& counter, int64_t n) { counter.store(counter.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
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

}  // namespace

void* host_allocate(size_t bytes) {
  const size_t size = rounded(bytes == 0 ? 1 : bytes);
  if (size > kMaxCachedBlock) {
    void* p = std::aligned_alloc(64, size);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  ThreadCache* mine = this_thread();
  void* p = mine != nullptr && size <= kMaxThreadBlock ? pop(mine->free_blocks, size) : nullptr;
  if (p != nullptr) {
    mine->add(mine->cached_bytes, -static_cast<int64_t>(size));
  } else {
    SharedCache& s = shared();
    std::lock_guard<std::mutex> lock(s.mu);
    p = pop(s.free_blocks, size);
    if (p != nullptr) s.cached_bytes -= static_cast<int64_t>(size);
  }
  if (mine != nullptr) mine->add(p != nullptr ? mine->hits : mine->misses, 1);
  if (p != nullptr) return p;
  p = std::aligned_alloc(64, size);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void host_free(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  const size_t size = rounded(bytes == 0 ? 1 : bytes);
  if (size > kMaxCachedBlock) return std::free(ptr);
  ThreadCache* mine = this_thread();
  if (mine != nullptr && size <= kMaxThreadBlock) {
    if (mine->cached_bytes.load(std::memory_order_relaxed) + static_cast<int64_t>(size) > kMaxThreadBytes) {
      // Full: most of it is likely blocks another thread allocates and this one frees (a pipeline's
      // batches, a replica's shard): they go where that thread will find them, and this thread's
      // cache starts again from what it frees now.
      SharedCache& s = shared();
      std::lock_guard<std::mutex> lock(s.mu);
      mine->move_to(s);
    }
    mine->free_blocks[size].push_back(ptr);
    mine->add(mine->cached_bytes, static_cast<int64_t>(size));
    return;
  }
  SharedCache& s = shared();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.cached_bytes + static_cast<int64_t>(size) <= kMaxCachedBytes) {
      s.free_blocks[size].push_back(ptr);
      s.cached_bytes += static_cast<int64_t>(size);
      return;
    }
  }
  std::free(ptr);
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
      for (void* p : blocks) std::free(p);
    }
    mine->free_blocks.clear();
    mine->cached_bytes.store(0, std::memory_order_relaxed);
  }
  SharedCache& s = shared();
  std::lock_guard<std::mutex> lock(s.mu);
  for (auto& [size, blocks] : s.free_blocks) {
    for (void* p : blocks) std::free(p);
  }
  s.free_blocks.clear();
  s.cached_bytes = 0;
}

}  // namespace keel
