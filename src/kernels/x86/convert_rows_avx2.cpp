// fp32 <-> bf16 rows for AVX2 (see kernels/convert_rows.h): the integer form
// of f32_to_bf16_bits, 8 lanes at a time, the tail scalar. Compiled through
// the target attribute; called only when cpu_features() reports AVX2
// (convert_rows.cpp).
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "milrt/dtype.h"

namespace milrt::kernels {

namespace {

// bf16 bits in the low half of each 32-bit lane.
__attribute__((target("avx2"))) inline __m256i to_bf16(__m256i x) {
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  const __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
  // |x| > inf as signed compares: both sides are below 2^31.
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(rounded, quiet_nan, nan);
}

__attribute__((target("avx2"))) inline void sixteen(const float* s, uint16_t* d) {
  const __m256i lo = to_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
  const __m256i hi = to_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 8)));
  // packus works within 128-bit halves (lo0 hi0 lo1 hi1): the permute restores the order.
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8));
}

// Eight words of a bf16 pair row (see f32_row_pair_to_bf16_words); b null: zeros.
__attribute__((target("avx2"))) inline void eight(const float* a, const float* b, uint32_t* d) {
  const __m256i lo = to_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a)));
  const __m256i hi = b ? _mm256_slli_epi32(to_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b))), 16)
                       : _mm256_setzero_si256();
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), _mm256_or_si256(lo, hi));
}

}  // namespace

__attribute__((target("avx2"))) void f32_to_bf16_row_avx2(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  // 16 values per step; the tail through a zero-padded copy.
  for (; i + 16 <= n; i += 16) sixteen(src + i, dst + i);
  if (i < n) {
    float in[16] = {};
    uint16_t out[16];
    std::memcpy(in, src + i, size_t(n - i) * 4);
    sixteen(in, out);
    std::memcpy(dst + i, out, size_t(n - i) * 2);
  }
}

__attribute__((target("avx2"))) void bf16_to_f32_row_avx2(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_slli_epi32(w, 16));
  }
  for (; i < n; ++i) {
    const uint32_t x = uint32_t(src[i]) << 16;
    std::memcpy(dst + i, &x, 4);
  }
}

__attribute__((target("avx2"))) void f32_row_pair_to_bf16_words_avx2(const float* r0, const float* r1, uint32_t* dst,
                                                                     int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) eight(r0 + i, r1 ? r1 + i : nullptr, dst + i);
  if (i < n) {
    // The tail through zero-padded copies.
    float a[8] = {}, b[8] = {};
    uint32_t out[8];
    std::memcpy(a, r0 + i, size_t(n - i) * 4);
    if (r1) std::memcpy(b, r1 + i, size_t(n - i) * 4);
    eight(a, r1 ? b : nullptr, out);
    std::memcpy(dst + i, out, size_t(n - i) * 4);
  }
}

// fp16 <-> fp32 rows on F16C (part of the AVX2 path): VCVTPS2PH rounds to
// nearest-even, as milrt::f32_to_f16; the tails go through those functions.
__attribute__((target("avx,f16c"))) void f16_to_f32_row_f16c(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

__attribute__((target("avx,f16c"))) void f32_to_f16_row_f16c(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

}  // namespace milrt::kernels
#endif
