#include "kernels/generic/permute.h"

#include <cstring>

namespace milrt::kernels {

void strided_copy(const void* src, void* dst, int rank, const int64_t* dims, const int64_t* ss, const int64_t* ds,
                  int bytes) {
  auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  if (rank == 0) { std::memcpy(d, s, size_t(bytes)); return; }
  for (int i = 0; i < rank; ++i) if (dims[i] == 0) return;
  int64_t idx[16] = {};
  int64_t so = 0, dof = 0;
  const int r = rank - 1;
  const bool unit = ss[r] == 1 && ds[r] == 1;
  while (true) {
    if (unit) {
      std::memcpy(d + dof * bytes, s + so * bytes, size_t(dims[r] * bytes));
    } else {
      for (int64_t i = 0; i < dims[r]; ++i)
        std::memcpy(d + (dof + i * ds[r]) * bytes, s + (so + i * ss[r]) * bytes, size_t(bytes));
    }
    int k = r - 1;
    for (; k >= 0; --k) {
      so += ss[k];
      dof += ds[k];
      if (++idx[k] < dims[k]) break;
      so -= ss[k] * dims[k];
      dof -= ds[k] * dims[k];
      idx[k] = 0;
    }
    if (k < 0) return;
  }
}

}  // namespace milrt::kernels
