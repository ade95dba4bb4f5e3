// Host memory for tensor storage, with a cache of freed blocks (as PyTorch's caching allocator):
// a training step allocates the same sizes every step, and reusing blocks avoids a malloc, and for
// large blocks an mmap/munmap and a page fault per page, on every step. The cache only affects host
// memory; the HBM ledger charges tensors independently of it. Each thread keeps its blocks under
// 4 MiB (32 MiB of them in all) with no lock; the rest are shared under one.
#pragma once

#include <cstddef>
#include <cstdint>

namespace keel {

// 64-byte aligned (AVX-512 loads); blocks of 4 MiB and more are whole transparent huge pages (2 MiB,
// where the kernel has them): their first touch costs one page fault per 2 MiB, not per 4 KiB (on
// virtual machines such a fault costs microseconds: writing a fresh Fashion-MNIST tensor took 0.7 s
// with 4 KiB pages). Never returns nullptr: throws std::bad_alloc.
void* host_allocate(size_t bytes);
void host_free(void* ptr, size_t bytes);

// Advises the kernel to back the whole 2 MiB pages inside [p, p + bytes) with transparent huge pages
// (madvise MADV_HUGEPAGE): for large buffers other than tensors that are written once, soon after
// they are allocated (a decoded dataset file). Advice only; nothing changes where the kernel has none.
void advise_huge_pages(void* p, size_t bytes);

struct HostCacheStats {
  int64_t cached_bytes = 0;  // held in the cache, free for reuse
  int64_t hits = 0;
  int64_t misses = 0;
};
HostCacheStats host_cache_stats();
// Returns the shared cache's blocks and this thread's to the system (other threads keep theirs).
void host_cache_release();

}  // namespace keel
