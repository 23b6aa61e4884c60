#include "support/alloc_counter.h"

#include <cxxabi.h>
#include <execinfo.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
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

// The first kKept allocations counted keep their call stacks. backtrace()
// allocates nothing once warmed up (the constructor calls it first).
constexpr int kKept = 4;
constexpr int kDepth = 24;
void* g_stacks[kKept][kDepth];
int g_depths[kKept];

void Count() {
  if (!g_counting.load(std::memory_order_relaxed)) return;
  const uint64_t i = g_count.fetch_add(1, std::memory_order_relaxed);
  if (i < kKept) g_depths[i] = backtrace(g_stacks[i], kDepth);
}

[[maybe_unused]] void* CountedAlloc(std::size_t n) {
  Count();
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
[[maybe_unused]] void* CountedAlignedAlloc(std::size_t n, std::align_val_t al) {
  Count();
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
  void* warm[2];
  backtrace(warm, 2);  // loads the unwinder now, not inside operator new
  g_count.store(0);
  g_counting.store(true);
}
AllocationCounter::~AllocationCounter() { g_counting.store(false); }
uint64_t AllocationCounter::count() const { return g_count.load(); }

std::string AllocationCounter::Where() {
  // An allocation racing with the counter's end may leave a stack half
  // written; that only garbles the report.
  const int kept = static_cast<int>(std::min<uint64_t>(g_count.load(), kKept));
  std::string out;
  for (int i = 0; i < kept; ++i) {
    out += "allocation " + std::to_string(i + 1) + ":\n";
    std::unique_ptr<char*, decltype(&std::free)> names(
        backtrace_symbols(g_stacks[i], g_depths[i]), &std::free);
    for (int f = 1; f < g_depths[i] && names; ++f) {  // 0 is Count()
      // "binary(mangled+0x1f) [addr]": demangle the name where there is one.
      std::string line = names.get()[f];
      const size_t open = line.find('('), plus = line.find('+', open);
      if (open != std::string::npos && plus != std::string::npos && plus > open + 1) {
        int ok = -1;
        std::unique_ptr<char, decltype(&std::free)> plain(
            abi::__cxa_demangle(line.substr(open + 1, plus - open - 1).c_str(), nullptr, nullptr, &ok),
            &std::free);
        if (ok == 0) line = plain.get();
      }
      out += "  " + line + '\n';
    }
  }
  return out;
}
bool AllocationCounter::available() {
#ifdef SS_SANITIZED
  return false;
#else
  return true;
#endif
}

}  // namespace shardstream::testing
