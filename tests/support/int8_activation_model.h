// The int8 activation scheme of weight_gemm.h (ActivationQuant::int8) as
// the int8 and int4 kernel tests model it: plain scalar code, independent of
// the kernel's loops.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace milrt::test {

// One row of A quantized as weight_gemm.h specifies, written independently of
// the kernel: per block, s = max|a| / 127 in fp32 (a block with inf or NaN:
// s = NaN and q = 0; s = 0, from zeros or underflow: q = 0), q = a / s (fp32
// division) clamped to [-127, 127] and rounded to nearest even.
struct QuantRow {
  std::vector<int> q;
  std::vector<float> s;
};
inline QuantRow quantize_row(const float* a, int64_t k, int64_t block) {
  QuantRow r{std::vector<int>(size_t(k)), std::vector<float>(size_t(k / block))};
  for (int64_t b = 0; b < k / block; ++b) {
    float amax = 0;
    bool finite = true;
    for (int64_t t = 0; t < block; ++t) {
      const float x = a[b * block + t];
      if (!std::isfinite(x)) finite = false;
      else amax = std::max(amax, std::fabs(x));
    }
    const float s = amax / 127.0f;
    if (!finite || s == 0) {
      r.s[size_t(b)] = finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    r.s[size_t(b)] = s;
    for (int64_t t = 0; t < block; ++t) {
      const float x = std::clamp(a[b * block + t] / s, -127.0f, 127.0f);
      r.q[size_t(b * block + t)] = int(std::nearbyint(x));
    }
  }
  return r;
}

}  // namespace milrt::test
