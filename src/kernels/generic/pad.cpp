#include "kernels/generic/pad.h"

#include <cstring>

#include "kernels/generic/copy.h"

namespace milrt::kernels {
namespace {

// The source index of output index `o` along a dim of size n, or -1 for the fill.
int64_t source_index(int64_t o, int64_t before, int64_t n, PadMode mode) {
  int64_t j = o - before;
  if (j >= 0 && j < n) return j;
  if (mode == PadMode::Constant) return -1;
  if (mode == PadMode::Replicate) return j < 0 ? 0 : n - 1;
  return j < 0 ? -j : 2 * (n - 1) - j;
}

// count copies of the es-byte value at `fill` from d on.
void fill_elements(uint8_t* d, int64_t count, const void* fill, size_t es) {
  auto typed = [&]<class T>(T) {
    T v;
    std::memcpy(&v, fill, sizeof(T));
    T* p = reinterpret_cast<T*>(d);
    for (int64_t k = 0; k < count; ++k) std::memcpy(p + k, &v, sizeof(T));
  };
  switch (es) {
    case 1: return typed(uint8_t{});
    case 2: return typed(uint16_t{});
    case 4: return typed(uint32_t{});
    case 8: return typed(uint64_t{});
    default:
      for (int64_t k = 0; k < count; ++k) std::memcpy(d + size_t(k) * es, fill, es);
  }
}

}  // namespace

void pad(const void* src, void* dst, int rank, const int64_t* in_dims, const int64_t* before, const int64_t* after,
         PadMode mode, const void* fill, int bytes) {
  auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  const size_t es = size_t(bytes);
  if (rank == 0) { std::memcpy(d, s, es); return; }
  int64_t out_dims[16], in_stride[16];
  int64_t rows = 1;
  for (int i = 0; i < rank; ++i) {
    out_dims[i] = in_dims[i] + before[i] + after[i];
    if (out_dims[i] == 0) return;
  }
  in_stride[rank - 1] = 1;
  for (int i = rank - 1; i > 0; --i) in_stride[i - 1] = in_stride[i] * in_dims[i];
  for (int i = 0; i < rank - 1; ++i) rows *= out_dims[i];
  const int r = rank - 1;
  const int64_t n = in_dims[r], b = before[r], w = out_dims[r];
  if (mode == PadMode::Constant && n * bytes < 64) {
    // Short rows (a slice's gradient such as RoPE's [..., D/2, 1] -> [..., D/2, 2]):
    // the per-row index walk below cost ~10 ns a row. Fill everything, then
    // copy the source into its window as one strided block.
    fill_elements(d, rows * w, fill, es);
    int64_t out_stride[16], src_stride[16], offset = 0;
    out_stride[r] = 1;
    for (int i = r; i > 0; --i) out_stride[i - 1] = out_stride[i] * out_dims[i];
    for (int i = 0; i < rank; ++i) offset += before[i] * out_stride[i], src_stride[i] = in_stride[i];
    strided_copy(s, d + size_t(offset) * es, rank, in_dims, src_stride, out_stride, bytes);
    return;
  }
  int64_t idx[16] = {};
  for (int64_t row = 0; row < rows; ++row, d += size_t(w) * es) {
    // Source row of this output row, or none when any outer dim is in the fill.
    int64_t so = 0;
    bool inside = true;
    for (int i = 0; i < r && inside; ++i) {
      int64_t j = source_index(idx[i], before[i], in_dims[i], mode);
      inside = j >= 0;
      so += j * in_stride[i];
    }
    if (!inside || n == 0) {
      for (int64_t k = 0; k < w; ++k) std::memcpy(d + size_t(k) * es, fill, es);
    } else {
      const uint8_t* srow = s + size_t(so) * es;
      for (int64_t k = 0; k < b; ++k) {
        int64_t j = source_index(k, b, n, mode);
        std::memcpy(d + size_t(k) * es, j < 0 ? fill : srow + size_t(j) * es, es);
      }
      std::memcpy(d + size_t(b) * es, srow, size_t(n) * es);
      for (int64_t k = b + n; k < w; ++k) {
        int64_t j = source_index(k, b, n, mode);
        std::memcpy(d + size_t(k) * es, j < 0 ? fill : srow + size_t(j) * es, es);
      }
    }
    for (int i = r - 1; i >= 0; --i) {
      if (++idx[i] < out_dims[i]) break;
      idx[i] = 0;
    }
  }
}

}  // namespace milrt::kernels
