// Replaces the global operator new/delete (every form, nothrow and aligned
// included) of a test executable with counting versions, so a test can check
// that a hot path allocates nothing: allocations_during(f), or set g_counting
// and read g_allocations.
// Include from exactly one .cpp of an executable (these are definitions, as
// replacement functions must be); never from the support library.
#pragma once
#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};

void* counted_alloc(std::size_t n, std::size_t align) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  void* p = align > alignof(std::max_align_t) ? std::aligned_alloc(align, (n + align - 1) / align * align)
                                              : std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  return p;
}

// Allocations made by f().
template <class F>
long allocations_during(F f) {
  g_allocations = 0;
  g_counting = true;
  f();
  g_counting = false;
  return g_allocations.load();
}
}  // namespace

void* operator new(std::size_t n) { return counted_alloc(n, 0); }
void* operator new[](std::size_t n) { return counted_alloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return counted_alloc(n, std::size_t(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted_alloc(n, std::size_t(a)); }
// The nothrow forms too: left to the runtime (ASan's, say), they would hand
// out memory that the deletes below free with the wrong allocator.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try { return counted_alloc(n, 0); } catch (...) { return nullptr; }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try { return counted_alloc(n, 0); } catch (...) { return nullptr; }
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try { return counted_alloc(n, std::size_t(a)); } catch (...) { return nullptr; }
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try { return counted_alloc(n, std::size_t(a)); } catch (...) { return nullptr; }
}
// GCC inlines these deletes into callers, sees free() on a pointer from
// operator new, and warns (-Wmismatched-new-delete) although the new above
// is malloc: a false positive for replacement functions.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop
