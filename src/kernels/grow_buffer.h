// A buffer that only grows, 64-byte aligned (whole cache lines, aligned
// vector loads). Kernels keep one per thread (thread_local) for packed
// operands and panels, so that once a plan's shapes were seen no call
// allocates.
#pragma once
#include <algorithm>
#include <cstddef>
#include <memory>
#include <new>

namespace milrt::kernels {

class GrowBuffer {
 public:
  // At least `bytes` bytes; the old contents are not kept when it grows.
  // The first allocation is at least kFloor, so products whose shapes creep
  // up run after run (attention tiles over a filling KV cache) do not
  // allocate again on every new width.
  void* get(size_t bytes) {
    if (bytes > cap_) {
      cap_ = std::max(bytes, kFloor);
      buf_.reset(static_cast<std::byte*>(::operator new[](cap_, std::align_val_t(64))));
    }
    return buf_.get();
  }
  template <class T>
  T* get_as(size_t elems) { return static_cast<T*>(get(elems * sizeof(T))); }

 private:
  static constexpr size_t kFloor = size_t(256) << 10;
  struct Free {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t(64)); }
  };
  std::unique_ptr<std::byte[], Free> buf_;
  size_t cap_ = 0;
};

}  // namespace milrt::kernels
