#include "kernels/generic/index_ops.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <numeric>
#include <type_traits>

namespace milrt::kernels {

void fill(void* dst, int64_t n, const void* value, size_t elem_size) {
  auto* d = static_cast<uint8_t*>(dst);
  if (n <= 0) return;
  std::memcpy(d, value, elem_size);
  // Doubling copies: each memcpy copies everything written so far.
  int64_t done = 1;
  while (done < n) {
    int64_t c = std::min(done, n - done);
    std::memcpy(d + size_t(done) * elem_size, d, size_t(c) * elem_size);
    done += c;
  }
}

void one_hot(const int32_t* idx, int64_t outer, int64_t inner, int64_t depth, const void* on, const void* off,
             size_t elem_size, void* dst) {
  auto* d = static_cast<uint8_t*>(dst);
  fill(d, outer * depth * inner, off, elem_size);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      int32_t h = idx[o * inner + i];
      if (h >= 0 && h < depth) std::memcpy(d + size_t((o * depth + h) * inner + i) * elem_size, on, elem_size);
    }
}

namespace {
// Writes the tile of dims [d, rank) at dst from src; returns the bytes written.
size_t tile_dim(const uint8_t* src, int d, int rank, const int64_t* dims, const int64_t* reps, size_t elem,
                uint8_t* dst) {
  size_t once = 0;
  if (d == rank - 1) {
    once = size_t(dims[d]) * elem;
    std::memcpy(dst, src, once);
  } else {
    size_t src_block = elem;
    for (int e = d + 1; e < rank; ++e) src_block *= size_t(dims[e]);
    for (int64_t i = 0; i < dims[d]; ++i) once += tile_dim(src + size_t(i) * src_block, d + 1, rank, dims, reps, elem, dst + once);
  }
  // The other repetitions of this dim copy the first one.
  for (int64_t r = 1; r < reps[d]; ++r) std::memcpy(dst + size_t(r) * once, dst, once);
  return once * size_t(reps[d]);
}
}  // namespace

void tile(const void* src, int rank, const int64_t* dims, const int64_t* reps, size_t elem_size, void* dst) {
  for (int d = 0; d < rank; ++d)
    if (dims[d] == 0) return;
  if (rank == 0) {
    std::memcpy(dst, src, elem_size);
    return;
  }
  tile_dim(static_cast<const uint8_t*>(src), 0, rank, dims, reps, elem_size, static_cast<uint8_t*>(dst));
}

void band_part(const void* src, int64_t batch, int64_t rows, int64_t cols, int64_t lower, int64_t upper,
               size_t elem_size, void* dst) {
  const size_t total = size_t(batch * rows * cols) * elem_size;
  if (src != dst) std::memcpy(dst, src, total);
  auto* d = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t m = 0; m < rows; ++m) {
      uint8_t* row = d + size_t((b * rows + m) * cols) * elem_size;
      // Kept columns form one run [lo, hi): m - n <= lower and n - m <= upper.
      int64_t lo = lower < 0 ? 0 : std::clamp<int64_t>(m - lower, 0, cols);
      int64_t hi = upper < 0 ? cols : std::clamp<int64_t>(m + upper + 1, 0, cols);
      if (hi < lo) hi = lo;
      std::memset(row, 0, size_t(lo) * elem_size);
      std::memset(row + size_t(hi) * elem_size, 0, size_t(cols - hi) * elem_size);
    }
}

namespace {
template <class T, class Acc>
void cumsum_impl(const T* x, int64_t outer, int64_t n, int64_t inner, bool exclusive, bool reverse, T* dst) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      Acc sum = 0;
      for (int64_t t = 0; t < n; ++t) {
        int64_t at = (o * n + (reverse ? n - 1 - t : t)) * inner + i;
        Acc v = Acc(x[at]);   // read before the write: dst may be x
        Acc out = exclusive ? sum : sum + v;
        sum += v;
        if constexpr (std::is_integral_v<T>) dst[at] = T(std::clamp<Acc>(out, INT32_MIN, INT32_MAX));
        else dst[at] = T(out);
      }
    }
}
}  // namespace

void cumsum(const float* x, int64_t outer, int64_t n, int64_t inner, bool exclusive, bool reverse, float* dst) {
  cumsum_impl<float, double>(x, outer, n, inner, exclusive, reverse, dst);
}
void cumsum(const int32_t* x, int64_t outer, int64_t n, int64_t inner, bool exclusive, bool reverse, int32_t* dst) {
  cumsum_impl<int32_t, int64_t>(x, outer, n, inner, exclusive, reverse, dst);
}

namespace {
template <class T>
void topk_impl(const T* x, int64_t outer, int64_t n, int64_t inner, int64_t k, bool ascending, T* values,
               int32_t* indices, int32_t* p) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const T* line = x + o * n * inner + i;
      auto val = [&](int32_t j) { return line[int64_t(j) * inner]; };
      // A strict total order: NaNs last, then by value, then by position
      // (what a stable sort gives), so partial_sort's result is unique.
      auto before = [&](int32_t a, int32_t b) {
        T va = val(a), vb = val(b);
        if constexpr (!std::is_integral_v<T>) {
          bool na = std::isnan(va), nb = std::isnan(vb);
          if (na || nb) return na != nb ? nb : a < b;
        }
        if (va != vb) return ascending ? va < vb : va > vb;
        return a < b;
      };
      std::iota(p, p + n, 0);
      std::partial_sort(p, p + k, p + n, before);
      for (int64_t j = 0; j < k; ++j) {
        int64_t at = (o * k + j) * inner + i;
        values[at] = val(p[j]);
        if (indices) indices[at] = p[j];
      }
    }
}
}  // namespace

void topk(const float* x, int64_t outer, int64_t n, int64_t inner, int64_t k, bool ascending, float* values,
          int32_t* indices, int32_t* scratch) {
  topk_impl(x, outer, n, inner, k, ascending, values, indices, scratch);
}
void topk(const int32_t* x, int64_t outer, int64_t n, int64_t inner, int64_t k, bool ascending, int32_t* values,
          int32_t* indices, int32_t* scratch) {
  topk_impl(x, outer, n, inner, k, ascending, values, indices, scratch);
}

}  // namespace milrt::kernels
