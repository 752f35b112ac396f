#include "kernels/generic/round_f16.h"

#include <algorithm>

#include "kernels/convert_rows.h"

namespace milrt::kernels {

void round_to_f16(const float* s, float* d, int64_t n) {
  constexpr int64_t kChunk = 256;  // through fp16 bits on the stack, in L1
  uint16_t h[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = std::min(kChunk, n - i);
    f32_to_f16_row(s + i, h, len);
    f16_to_f32_row(h, d + i, len);
  }
}

}  // namespace milrt::kernels
