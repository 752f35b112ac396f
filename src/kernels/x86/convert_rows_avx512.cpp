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

}  // namespace milrt::kernels
#endif
