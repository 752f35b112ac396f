#include "kernels/generic/round_f16.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/cpu_features.h"
#include "milrt/dtype.h"

namespace milrt::kernels {
namespace {
void round_scalar(const float* s, float* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = f16_to_f32(f32_to_f16(s[i]));
}

#if defined(__x86_64__)
__attribute__((target("avx,f16c"))) void round_f16c(const float* s, float* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT |
                                                                                        _MM_FROUND_NO_EXC)));
  round_scalar(s + i, d + i, n - i);
}
#else
// Off x86 cpu_features().f16c is false and this is never called.
void round_f16c(const float* s, float* d, int64_t n) { round_scalar(s, d, n); }
#endif
}  // namespace

void round_to_f16(const float* s, float* d, int64_t n) {
  static const bool f16c = cpu_features().f16c;
  if (f16c) round_f16c(s, d, n);
  else round_scalar(s, d, n);
}

}  // namespace milrt::kernels
