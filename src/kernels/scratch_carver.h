// Laying several arrays out in one scratch buffer: the attention kernels
// size their per-thread scratch with a counting pass (p = nullptr) and then
// carve the real buffer with the same calls, so sizes and offsets cannot
// drift apart.
#pragma once
#include <cstddef>
#include <cstdint>

namespace milrt::kernels {

// Hands out 64-byte aligned pieces of one buffer (null: only counts).
struct Carver {
  char* p;
  size_t used = 0;
  template <class T>
  T* take(int64_t n) {
    used = (used + 63) & ~size_t(63);
    T* r = p ? reinterpret_cast<T*>(p + used) : nullptr;
    used += size_t(n) * sizeof(T);
    return r;
  }
};

// The first 64-byte boundary at or after p.
inline char* align64(void* p) {
  return reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t(63));
}

// x rounded up to a multiple of m (x >= 0, m > 0).
inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

}  // namespace milrt::kernels
