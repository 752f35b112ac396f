// fp32 <-> bf16 rows for AVX-512 (see kernels/convert_rows.h): the integer
// form of f32_to_bf16_bits, 16 lanes at a time, the tail under a mask.
// Compiled through the target attribute; called only when cpu_features()
// reports AVX-512 (convert_rows.cpp).
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

#include "kernels/x86/amx_bf16_common.h"

namespace milrt::kernels {

using x86::bf16_lanes;

__attribute__((target("avx512f"))) void f32_to_bf16_row_avx512(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(bf16_lanes(_mm512_loadu_si512(src + i))));
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1);
    _mm512_mask_cvtepi32_storeu_epi16(dst + i, m, bf16_lanes(_mm512_maskz_loadu_epi32(m, src + i)));
  }
}

__attribute__((target("avx512f"))) void bf16_to_f32_row_avx512(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    _mm512_storeu_si512(dst + i, _mm512_slli_epi32(w, 16));
  }
  for (; i < n; ++i) {
    const uint32_t x = uint32_t(src[i]) << 16;
    __builtin_memcpy(dst + i, &x, 4);
  }
}

__attribute__((target("avx512f"))) void f32_row_pair_to_bf16_words_avx512(const float* r0, const float* r1,
                                                                          uint32_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    const __m512i lo = bf16_lanes(_mm512_maskz_loadu_epi32(m, r0 + i));
    const __m512i hi = r1 ? _mm512_slli_epi32(bf16_lanes(_mm512_maskz_loadu_epi32(m, r1 + i)), 16) : _mm512_setzero_si512();
    _mm512_mask_storeu_epi32(dst + i, m, _mm512_or_si512(lo, hi));
  }
}

// By blocks of 16 rows × 16 pairs: each row's 16 words loaded (masked past
// the whole pairs, zero for rows past width), transposed, stored as 16 words
// of 16 pair rows. The odd K's last pair row goes word by word.
__attribute__((target("avx512f"))) void bf16_rows_to_pair_panel_avx512(const uint16_t* src, int64_t ld, int64_t width,
                                                                       int64_t K, int64_t nr, uint32_t* words) {
  const int64_t whole = K / 2;
  for (int64_t j0 = 0; j0 < nr; j0 += 16)
    for (int64_t p0 = 0; p0 < whole; p0 += 16) {
      const int64_t np = whole - p0 < 16 ? whole - p0 : 16;
      const __mmask16 m = __mmask16((1u << np) - 1);
      __m512 r[16];
      for (int64_t i = 0; i < 16; ++i)
        r[i] = j0 + i < width ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi32(m, src + (j0 + i) * ld + 2 * p0))
                              : _mm512_setzero_ps();
      x86::transpose16(r);
      for (int64_t q = 0; q < np; ++q) _mm512_storeu_ps(reinterpret_cast<float*>(words + (p0 + q) * nr + j0), r[q]);
    }
  if (K % 2)
    for (int64_t j = 0; j < nr; ++j) words[whole * nr + j] = j < width ? src[j * ld + 2 * whole] : 0u;
}

}  // namespace milrt::kernels
#endif
