#include "kernels/generic/gather.h"

#include <cstring>

namespace milrt::kernels {

int64_t gather_rows(const void* src, int64_t outer, int64_t n, int64_t inner, size_t elem_size,
                    const int32_t* idx, int64_t m, void* dst) {
  const size_t row = size_t(inner) * elem_size;
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < m; ++i)
    if (idx[i] < -n || idx[i] >= n) return i;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < m; ++i) {
      int64_t k = idx[i] < 0 ? idx[i] + n : idx[i];
      std::memcpy(d + size_t(o * m + i) * row, s + size_t(o * n + k) * row, row);
    }
  return -1;
}

}  // namespace milrt::kernels
