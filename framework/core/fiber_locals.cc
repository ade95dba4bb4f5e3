#include "framework/core/fiber_locals.h"

#include <atomic>
#include <new>
#include <stdexcept>
#include <vector>

namespace keel {
namespace {

struct Layout {
  std::vector<detail::FiberLocalType> types;
  std::vector<size_t> offsets;
  size_t size = 0;
  size_t align = alignof(std::max_align_t);
};

Layout& layout() {
  static Layout l;
  return l;
}

std::atomic<bool> g_layout_fixed{false};

}  // namespace

void detail::register_fiber_local(const FiberLocalType& type) {
  if (g_layout_fixed.load()) {
    throw std::logic_error("register_fiber_local: a thread-local was registered after the first fiber was made");
  }
  Layout& l = layout();
  const size_t at = (l.size + type.align - 1) / type.align * type.align;
  l.types.push_back(type);
  l.offsets.push_back(at);
  l.size = at + type.size;
  if (type.align > l.align) l.align = type.align;
}

FiberLocals::FiberLocals() {
  g_layout_fixed = true;
  const Layout& l = layout();
  storage_ = ::operator new(l.size == 0 ? 1 : l.size, std::align_val_t{l.align});
  char* base = static_cast<char*>(storage_);
  for (size_t i = 0; i < l.types.size(); ++i) l.types[i].construct(base + l.offsets[i]);
}

FiberLocals::~FiberLocals() {
  const Layout& l = layout();
  char* base = static_cast<char*>(storage_);
  for (size_t i = 0; i < l.types.size(); ++i) l.types[i].destroy(base + l.offsets[i]);
  ::operator delete(storage_, std::align_val_t{l.align});
}

void FiberLocals::swap_with_thread() noexcept {
  const Layout& l = layout();
  char* base = static_cast<char*>(storage_);
  for (size_t i = 0; i < l.types.size(); ++i) l.types[i].swap_with_thread(base + l.offsets[i]);
}

}  // namespace keel
