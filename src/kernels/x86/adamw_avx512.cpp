// AdamW's update for AVX-512 CPUs. The generic loop cannot vectorize: the
// build keeps math-errno, so every std::sqrt is a scalar sqrtss with an errno
// branch. Same operations in the same order as the generic loop (separate
// multiply and add, IEEE sqrt and divide), so both paths give identical bits.
// Compiled through the target attribute, so no special flags are needed; only
// called when cpu_features() reports AVX-512F (see adamw.cpp). fp-contract=off:
// GCC fuses the intrinsics' multiply-adds into FMAs otherwise (C++ defaults to
// -ffp-contract=fast), and the generic path, without FMA, would differ by an ulp.
#if defined(__x86_64__)
#include <immintrin.h>

#include "kernels/generic/adamw.h"

namespace milrt::kernels {

// GCC 12 warns about its own _mm512_sqrt_ps (an undefined passthrough operand).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"), optimize("fp-contract=off"))) void adamw_update_f32_avx512(float* p, const float* g, float* m, float* v,
                                                                 int64_t n, const AdamWStep& s) {
  const __m512 b1 = _mm512_set1_ps(s.beta1), c1 = _mm512_set1_ps(1.0f - s.beta1);
  const __m512 b2 = _mm512_set1_ps(s.beta2), c2 = _mm512_set1_ps(1.0f - s.beta2);
  const __m512 scale = _mm512_set1_ps(s.grad_scale), step = _mm512_set1_ps(s.step_size);
  const __m512 ibc2 = _mm512_set1_ps(s.inv_sqrt_bc2), eps = _mm512_set1_ps(s.eps), decay = _mm512_set1_ps(s.decay);
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 k = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    __m512 gi = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, g + i), scale);
    __m512 mi = _mm512_add_ps(_mm512_mul_ps(b1, _mm512_maskz_loadu_ps(k, m + i)), _mm512_mul_ps(c1, gi));
    __m512 vi = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_maskz_loadu_ps(k, v + i)),
                              _mm512_mul_ps(c2, _mm512_mul_ps(gi, gi)));
    __m512 den = _mm512_add_ps(_mm512_mul_ps(_mm512_sqrt_ps(vi), ibc2), eps);
    __m512 pi = _mm512_sub_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + i), decay),
                              _mm512_div_ps(_mm512_mul_ps(step, mi), den));
    _mm512_mask_storeu_ps(m + i, k, mi);
    _mm512_mask_storeu_ps(v + i, k, vi);
    _mm512_mask_storeu_ps(p + i, k, pi);
  }
}
#pragma GCC diagnostic pop

}  // namespace milrt::kernels
#endif
