// AdamW's update for AVX2 CPUs without AVX-512: the 8-lane twin of
// adamw_avx512.cpp, for the same reason (the generic loop cannot vectorize:
// the build keeps math-errno, so every std::sqrt is a scalar sqrtss with an
// errno branch). Same operations in the same order as the generic loop
// (separate multiply and add, IEEE sqrt and divide), so both paths give
// identical bits. Compiled through the target attribute, so no special flags
// are needed; only called when the avx2 path is current (see adamw.cpp).
// fp-contract=off: GCC fuses the intrinsics' multiply-adds into FMAs otherwise
// (C++ defaults to -ffp-contract=fast), and the generic path, without FMA,
// would differ by an ulp.
#if defined(__x86_64__)
#include <immintrin.h>

#include "kernels/generic/adamw.h"

// On every function here, so that they inline into one another.
#define MILRT_AVX2_EXACT __attribute__((target("avx2"), optimize("fp-contract=off")))

namespace milrt::kernels {

// GCC 12 flags its own `__Y = __Y` idiom in the _mm*_undefined_* intrinsics (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace {

struct Consts {
  __m256 b1, c1, b2, c2, scale, step, ibc2, eps, decay;
};

template <bool Masked>
MILRT_AVX2_EXACT inline __m256 load8(const float* x, __m256i k) {
  if constexpr (Masked) return _mm256_maskload_ps(x, k);
  else return _mm256_loadu_ps(x);
}
template <bool Masked>
MILRT_AVX2_EXACT inline void store8(float* x, __m256i k, __m256 y) {
  if constexpr (Masked) _mm256_maskstore_ps(x, k, y);
  else _mm256_storeu_ps(x, y);
}

// Eight elements from i; Masked: only the lanes of `k` are read and written
// (the ragged tail; the other lanes compute 0 / eps, harmlessly). vmaskmovps
// stores are slow on AMD, so whole vectors use plain loads and stores.
template <bool Masked>
MILRT_AVX2_EXACT inline void update8(float* p, const float* g, float* m, float* v, int64_t i, const Consts& c,
                                     __m256i k) {
  __m256 gi = _mm256_mul_ps(load8<Masked>(g + i, k), c.scale);
  __m256 mi = _mm256_add_ps(_mm256_mul_ps(c.b1, load8<Masked>(m + i, k)), _mm256_mul_ps(c.c1, gi));
  __m256 vi = _mm256_add_ps(_mm256_mul_ps(c.b2, load8<Masked>(v + i, k)), _mm256_mul_ps(c.c2, _mm256_mul_ps(gi, gi)));
  __m256 den = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(vi), c.ibc2), c.eps);
  __m256 pi =
      _mm256_sub_ps(_mm256_mul_ps(load8<Masked>(p + i, k), c.decay), _mm256_div_ps(_mm256_mul_ps(c.step, mi), den));
  store8<Masked>(m + i, k, mi);
  store8<Masked>(v + i, k, vi);
  store8<Masked>(p + i, k, pi);
}

}  // namespace

MILRT_AVX2_EXACT void adamw_update_f32_avx2(float* p, const float* g, float* m, float* v, int64_t n,
                                            const AdamWStep& s) {
  const Consts c{_mm256_set1_ps(s.beta1),        _mm256_set1_ps(1.0f - s.beta1), _mm256_set1_ps(s.beta2),
                 _mm256_set1_ps(1.0f - s.beta2), _mm256_set1_ps(s.grad_scale),   _mm256_set1_ps(s.step_size),
                 _mm256_set1_ps(s.inv_sqrt_bc2), _mm256_set1_ps(s.eps),          _mm256_set1_ps(s.decay)};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) update8<false>(p, g, m, v, i, c, _mm256_setzero_si256());
  if (i < n) {
    const __m256i k = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(n - i)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    update8<true>(p, g, m, v, i, c, k);
  }
}
#pragma GCC diagnostic pop

}  // namespace milrt::kernels
#endif
