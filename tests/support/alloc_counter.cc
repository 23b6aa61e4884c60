#include "support/alloc_counter.h"

#include <atomic>
#include <cstdlib>
#include <new>

// Under sanitizers the replacement is left out: it would hide ASan's own
// operator new (and its new/delete mismatch checks) from every test in the
// binary. Counting is then unavailable (AllocationCounter::available()).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SS_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SS_SANITIZED 1
#endif
#endif

namespace {
std::atomic<bool> g_counting{false};
std::atomic<uint64_t> g_count{0};

[[maybe_unused]] void* CountedAlloc(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_count.fetch_add(1, std::memory_order_relaxed);
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
[[maybe_unused]] void* CountedAlignedAlloc(std::size_t n, std::align_val_t al) {
  if (g_counting.load(std::memory_order_relaxed)) g_count.fetch_add(1, std::memory_order_relaxed);
  void* p = nullptr;
  std::size_t a = static_cast<std::size_t>(al);
  if (a < sizeof(void*)) a = sizeof(void*);
  if (posix_memalign(&p, a, n == 0 ? a : n) != 0) throw std::bad_alloc();
  return p;
}
}  // namespace

#ifndef SS_SANITIZED
// Replacements of the global allocation functions for the whole test binary
// (they also see the library's allocations: the executable's definitions
// interpose).
void* operator new(std::size_t n) { return CountedAlloc(n); }
void* operator new[](std::size_t n) { return CountedAlloc(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try { return CountedAlloc(n); } catch (...) { return nullptr; }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try { return CountedAlloc(n); } catch (...) { return nullptr; }
}
void* operator new(std::size_t n, std::align_val_t a) { return CountedAlignedAlloc(n, a); }
void* operator new[](std::size_t n, std::align_val_t a) { return CountedAlignedAlloc(n, a); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#endif  // SS_SANITIZED

namespace shardstream::testing {

AllocationCounter::AllocationCounter() {
  g_count.store(0);
  g_counting.store(true);
}
AllocationCounter::~AllocationCounter() { g_counting.store(false); }
uint64_t AllocationCounter::count() const { return g_count.load(); }
bool AllocationCounter::available() {
#ifdef SS_SANITIZED
  return false;
#else
  return true;
#endif
}

}  // namespace shardstream::testing
